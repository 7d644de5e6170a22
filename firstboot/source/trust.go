package source

import (
	"fmt"
	"net/url"

	"github.com/kiln-project/kiln/internal/ignition"
)

// HashArg is the kernel argument that pins the config a node fetches, in
// the form of Ignition's verification.hash: sha512-<hex> (or sha256-).
const HashArg = "kiln.config.hash"

// UnverifiedError is a config from a source anyone on the network (http,
// tftp) or at the machine (a config drive) could supply, with no hash to
// check it against and an image that does not allow unverified configs.
type UnverifiedError struct{ What string }

func (e *UnverifiedError) Error() string {
	return fmt.Sprintf("refusing %s: nothing verifies it and the kernel command line has no %s= "+
		"(give %s=sha512-<hex>, as kiln gen prints it, fetch it over https, "+
		"or build the image with configTrust.allowUnverified: true)", e.What, HashArg, HashArg)
}

// pin is what a config from one source must match before it is used.
type pin struct {
	hash string // "" when nothing pins it (https, or an image that allows it)
	what string
}

// pin decides how the config described by what is verified: against
// kiln.config.hash= when the command line gives one; else a plain source
// is refused unless the image allows unverified configs.
func (e Env) pin(what string, plain bool) (pin, error) {
	if h := CmdlineArg(e.Cmdline, HashArg); h != "" {
		if err := ignition.CheckHashSpec(h); err != nil {
			return pin{}, fmt.Errorf("kernel argument %s=: %w", HashArg, err)
		}
		return pin{hash: h, what: what}, nil
	}
	if !plain {
		return pin{what: what}, nil
	}
	if !e.AllowUnverified {
		return pin{}, &UnverifiedError{What: what}
	}
	e.logf("%s is not verified: the image allows unverified configs (configTrust.allowUnverified)", what)
	return pin{what: what}, nil
}

func (p pin) check(data []byte) error {
	if p.hash == "" {
		return nil
	}
	if err := ignition.VerifyHash(data, p.hash, p.what); err != nil {
		return fmt.Errorf("%w (%s= on the kernel command line)", err, HashArg)
	}
	return nil
}

// plainURL reports whether a config fetched from rawURL could come from
// anyone on the path: http and tftp carry no server authentication.
func plainURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err != nil || u.Scheme != "https"
}

func (e Env) logf(format string, args ...any) {
	if e.Log != nil {
		e.Log(format, args...)
	}
}
