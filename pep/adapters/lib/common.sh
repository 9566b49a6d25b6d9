# Helpers shared by PEP adapters (POSIX sh). See pep/CONTRACT.md.

# die MESSAGE: the contract's one clear error line, then exit 1.
die() {
	echo "$ADAPTER_NAME: $*" >&2
	exit 1
}

# require_env VAR...: fail naming the first unset variable.
require_env() {
	for _v in "$@"; do
		eval "_val=\${$_v:-}"
		[ -n "$_val" ] || die "environment variable $_v is not set"
	done
}

# opt_get KEY DEFAULT: value of KEY in $SATBED_PEP_OPTS, else DEFAULT.
opt_get() {
	_res=$2
	for _kv in ${SATBED_PEP_OPTS:-}; do
		case $_kv in
		"$1"=*) _res=${_kv#*=} ;;
		esac
	done
	echo "$_res"
}

# proc_alive PID: true if PID runs. A daemon whose starter has exited is
# reaped by whatever adopted it, possibly late; a zombie counts as gone.
# Builtins only (read, parameter expansion): the health verbs run every two
# seconds of a transfer, and each process started costs milliseconds.
proc_alive() {
	kill -0 "$1" 2>/dev/null || return 1
	# The state follows the command name's closing parenthesis (the last one).
	_st=
	read -r _st 2>/dev/null <"/proc/$1/stat" || [ -n "$_st" ] || return 1
	_st=${_st##*) }
	[ "${_st%% *}" != Z ]
}

# pid_alive PIDFILE: true if the pid recorded in PIDFILE is running; the pid
# is left in $_pid.
pid_alive() {
	[ -s "$1" ] || return 1
	_pid=
	read -r _pid <"$1" || [ -n "$_pid" ]
	[ -n "$_pid" ] && proc_alive "$_pid"
}

# read_file FILE: the whole file into $_text, lines joined (builtins only).
read_file() {
	_text=
	while IFS= read -r _line || [ -n "$_line" ]; do
		_text=$_text$_line
	done <"$1"
}

# json_int KEY: the integer after "KEY": in $_text, in $_int ('' if absent).
json_int() {
	_int=${_text#*\"$1\":}
	[ "$_int" = "$_text" ] && _int= || _int=${_int%%[!0-9]*}
}

# nap: a short sleep where fractional seconds are supported.
nap() { sleep 0.1 2>/dev/null || sleep 1; }

# zero_stats NAME SPLITTING: the contract's stats object for a PEP that has
# not split anything (yet).
zero_stats() {
	printf '{"name":"%s","connections_split":0,"connections_active":0,"bytes_lan_to_wan":0,"bytes_wan_to_lan":0,"splitting":%s,"running":false}\n' "$1" "$2"
}
