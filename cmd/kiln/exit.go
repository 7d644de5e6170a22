package main

import (
	"errors"
	"os"

	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/internal/outdir"
	"github.com/kiln-project/kiln/internal/validation"
)

// exitUsage is returned for bad flags, arguments or input files;
// exitFailure for everything else.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error the operator can fix by changing the command
// line or an input file.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// reportedError is a failure the command has already told the operator
// about (the agent's final console line): kiln exits 1 without repeating it.
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

// inputError marks the error of loading an input file as a usage error
// when the file is missing or invalid.
func inputError(err error) error {
	var l *validation.List
	if errors.As(err, &l) || errors.Is(err, os.ErrNotExist) {
		return usageError{err}
	}
	return err
}

// outputError marks kiln's refusal to write where -o points as a usage
// error: the way out is another -o, or the operator moving their files.
func outputError(err error) error {
	var r *outdir.Refusal
	if errors.As(err, &r) {
		return usageError{err}
	}
	return err
}

// pkiError marks kiln's refusal of a PKI directory only the operator can
// fix as a usage error: each problem names the file and the way out.
func pkiError(err error) error {
	var ps pki.Problems
	if errors.As(err, &ps) {
		return usageError{err}
	}
	return err
}

// exitCode is the one place an error becomes an exit code. started says
// whether a command's RunE ran: an error before that is cobra's rejection
// of the command line (unknown command or flag, arguments, required flag).
func exitCode(err error, started bool) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case !started, errors.As(err, &ue):
		return exitUsage
	default:
		return exitFailure
	}
}
