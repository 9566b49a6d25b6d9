#!/bin/sh
# A Slurm test cluster in containers: one slurmctld and N slurmd nodes
# (satbed/slurm image; each node builds its cells' namespaces and runs satemu
# itself, so it has every capability the host's bounding set allows, as
# --privileged would, where that set lacks some), the repository mounted read-only and DIR shared by all
# at the same paths as on the host, as a lab's shared filesystem is. The
# submit host (this machine) reaches slurmctld on loopback only.
#   docker/slurm/cluster.sh up NAME DIR N    start it; prints the SLURM_CONF to use
#   docker/slurm/cluster.sh down NAME DIR    remove its containers and network
# Matrices run with `SLURM_CONF=DIR/etc/client.conf satbed matrix FILE
# --out DIR/shared/... --executor slurm`.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
image=satbed/slurm:latest
label=org.satbed.slurm

usage() { echo "usage: $0 up NAME DIR N | down NAME DIR" >&2; exit 2; }

down() {
	ids=$(docker ps -aq --filter "label=$label=$1")
	[ -z "$ids" ] || docker rm -f $ids >/dev/null
	docker network rm "$1-net" >/dev/null 2>&1 || true
	# The controller's munge socket directory: the container made it root's.
	rm -rf "$2/munge"
}

conf() {	# conf CTL_ADDR PORT N "" [more AuthInfo]
	cat <<CONF
ClusterName=satbed
SlurmctldHost=ctl($1)
SlurmctldPort=$2
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued task waits cred_expire before it may start again (default 120 s).
AuthInfo=cred_expire=10${5:+,$5}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# A requeued task becomes eligible when its begin time passes, which no event
# announces: only the periodic passes (every 60 s, backfill every 30 s by
# default) would start it. A cluster of two one-CPU nodes schedules in no time.
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
# A node that stops answering is DOWN after SlurmdTimeout and its jobs are
# requeued (sbatch --requeue); it returns to service when its slurmd is back.
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=10
KillWait=10
MinJobAge=600
JobRequeue=1
# One cell at a time per node: each node offers one CPU to Slurm.
NodeName=node[1-$3] CPUs=1 State=UNKNOWN
PartitionName=satbed Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

[ $# -ge 3 ] || usage
cmd=$1 name=$2 dir=$(mkdir -p "$3" && cd "$3" && pwd)
case $cmd in
down) down "$name" "$dir"; exit 0 ;;
up) [ $# -eq 4 ] || usage; n=$4 ;;
*) usage ;;
esac

docker image inspect "$image" >/dev/null 2>&1 || "$here/docker/build-images.sh" slurm >/dev/null
# Whatever stops it half-way (an error, Ctrl-C) takes the half-built cluster down.
trap 'down "$name" "$dir"' EXIT
trap 'exit 130' INT TERM
down "$name" "$dir"
mkdir -p "$dir/etc" "$dir/munge" "$dir/shared"
[ -s "$dir/etc/munge.key" ] || { umask 077; head -c 1024 /dev/urandom > "$dir/etc/munge.key"; }
# A free loopback port for slurmctld (the same number inside and out).
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# --privileged where the host allows every capability; else each it allows
# (a VM's may lack some, and runc then refuses --privileged).
last=$(cat /proc/sys/kernel/cap_last_cap)
full=$(( (1 << (last + 1)) - 1 ))
bnd=$(( 0x$(awk '/^CapBnd/ {print $2}' /proc/self/status) ))
if [ "$bnd" -eq "$full" ]; then
	caps=--privileged
else
	caps="--cap-add ALL --security-opt seccomp=unconfined --security-opt apparmor=unconfined"
	caps="$caps --security-opt systempaths=unconfined"
	for c in $(capsh --decode="$(printf '%x' $(( full & ~bnd )))" | sed 's/.*=//' | tr ',' ' '); do
		caps="$caps --cap-drop $(echo "${c#cap_}" | tr a-z A-Z)"
	done
fi
docker network create --label "$label=$name" "$name-net" >/dev/null
common="--label $label=$name --network $name-net -v $dir:$dir"
docker run -d --name "$name-ctl" --hostname ctl --network-alias ctl $common \
	-p "127.0.0.1:$port:$port" -v "$dir/munge:/run/munge" "$image" >/dev/null
i=1
while [ "$i" -le "$n" ]; do
	docker run -d $caps --name "$name-node$i" --hostname "node$i" --network-alias "node$i" $common \
		-v "$here:$here:ro" "$image" >/dev/null
	i=$((i + 1))
done
ctl=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$name-net\").IPAddress}}" "$name-ctl")
conf "$ctl" "$port" "$n" > "$dir/etc/slurm.conf"
# The submit host's copy: slurmctld on loopback, munge through the controller's socket.
conf 127.0.0.1 "$port" "$n" "" "socket=$dir/munge/munge.socket.2" > "$dir/etc/client.conf"
docker exec -d "$name-ctl" satbed-slurm-node ctl "$dir/etc"
i=1
while [ "$i" -le "$n" ]; do
	docker exec -d "$name-node$i" satbed-slurm-node node "$dir/etc"
	i=$((i + 1))
done
# Ready when every node is idle.
export SLURM_CONF="$dir/etc/client.conf"
t=0
until [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -eq "$n" ]; do
	t=$((t + 1))
	if [ "$t" -gt 60 ]; then
		echo "satbed: the Slurm cluster $name did not come up in 60 s:" >&2
		sinfo -N 2>&1 | tail -5 >&2 || true
		docker logs "$name-ctl" 2>&1 | tail -5 >&2 || true
		down "$name" "$dir"
		exit 1
	fi
	sleep 1
done
trap - EXIT
echo "$SLURM_CONF"
