// Package cli is the command-line contract satbed's Go programs share, so
// that satbed's adapters read every one the same way: bad input (a
// command, a flag or a value) is one line on stderr and exit status 2, a
// failure while working one line and status 1, -h the flags and status 0.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// UsageError is bad input: exit status 2, as opposed to a failure (1).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// ExitCode is the status a program ends with after err: 0 for none or for
// -h (the flags were printed), 2 for a UsageError, else 1.
func ExitCode(err error) int {
	var bad UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &bad):
		return 2
	}
	return 1
}

// Exit prints err as one line after the program's name, where it is one,
// and ends the program with its ExitCode.
func Exit(name string, err error) {
	code := ExitCode(err)
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	os.Exit(code)
}

// ParseFlags parses args into fs. A bad flag, or an argument left over, is
// one UsageError line, not the flag package's usage dump; -h prints the
// flags on stderr and returns flag.ErrHelp.
func ParseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stderr)
		fs.Usage()
		return err
	}
	if err != nil {
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return Usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}
