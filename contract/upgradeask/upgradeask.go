// Package upgradeask owns the protocol between kiln upgrade's rollout
// and a node's upgrade service, carried by annotations on the node's own
// Node: the rollout asks the node to stage a build and reboot onto it
// (AskAnnotation); the node answers that it staged the build and is
// rebooting (StagedAnnotation), that it could not stage it
// (FailedAnnotation), or, after the reboot, that it came back on its
// previous slot (RolledBackAnnotation). Every answer carries the request
// ID of the ask it answers, so an answer to an earlier ask is never
// taken for one to this. Each value has an Encode that refuses what its
// Decode would, and a Decode that refuses a malformed value naming the
// annotation and the field.
package upgradeask

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/netboot"
)

// The annotations: the ask is written by the rollout (an administrator),
// the answers by the node's kubelet credentials on its own Node.
const (
	// AskAnnotation is the rollout's ask: Ask as JSON.
	AskAnnotation = "kiln.dev/upgrade-ask"
	// StagedAnnotation is the request ID of the ask whose build the node
	// has written into its inactive slot, checked and marked staged; it
	// reboots next.
	StagedAnnotation = "kiln.dev/upgrade-staged"
	// FailedAnnotation is Failed as JSON: the node could not stage the
	// ask's build (a fetch, a digest) and still runs its image; nothing
	// was staged.
	FailedAnnotation = "kiln.dev/upgrade-failed"
	// RolledBackAnnotation is RolledBack as JSON: the staged slot's
	// trying boot was not marked good and the node runs its previous
	// slot again.
	RolledBackAnnotation = "kiln.dev/upgrade-rolled-back"
)

// ErrMalformed is wrapped by every refusal of a value.
var ErrMalformed = errors.New("malformed upgrade annotation")

// Ask is a stage-and-reboot request: the target build, where to fetch
// its PXE artifacts, and the digests they must have.
type Ask struct {
	// Request names this ask; every answer repeats it.
	Request string `json:"request"`
	// KilnSHA256 is the target build's kiln binary digest (hex), the
	// value the node publishes in kiln.dev/kiln-sha256 once it runs it.
	KilnSHA256 string `json:"kilnSHA256"`
	// Kubernetes is the target build's Kubernetes release (v1.37.1).
	Kubernetes string `json:"kubernetes"`
	// URL is the base the artifacts are fetched under: URL/vmlinuz,
	// URL/initrd.img, URL/rootfs.squashfs (ArtifactURL).
	URL       string    `json:"url"`
	Artifacts Artifacts `json:"artifacts"`
	// Args are the build's extra kernel arguments (its image spec's
	// kernel.cmdline), which the staged slot boots with
	// (bootslot.Slot.Args).
	Args []string `json:"args"`
}

// Artifacts are the sha256 (hex) of the build's PXE artifacts, as its
// node.manifest.json lists them.
type Artifacts struct {
	Kernel string `json:"vmlinuz"`
	Initrd string `json:"initrd.img"`
	Rootfs string `json:"rootfs.squashfs"`
}

// ArtifactURL is where the node fetches the artifact name
// (netboot.Kernel, netboot.Initrd, netboot.Rootfs).
func (a Ask) ArtifactURL(name string) string { return a.URL + "/" + name }

// Failed is a node's answer that it could not stage the ask Request.
type Failed struct {
	Request string `json:"request"`
	Reason  string `json:"reason"`
}

func (f Failed) Error() string { return "staging failed: " + f.Reason }

// RolledBack is a node's answer that the reboot onto the ask Request's
// build rolled back: From the staged slot, To the one it runs again.
type RolledBack struct {
	Request string        `json:"request"`
	From    bootslot.Slot `json:"from"`
	To      bootslot.Slot `json:"to"`
	Reason  string        `json:"reason"`
}

// Error is contract/bootslot's console line for the rollback.
func (r RolledBack) Error() string {
	return bootslot.Rollback{From: r.From, To: r.To, Reason: r.Reason}.ConsoleLine()
}

var (
	requestRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	sha256RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	releaseRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$`)
)

// Encode is the ask's annotation value.
func (a Ask) Encode() (string, error) { return encode(AskAnnotation, a, a.validate) }

// DecodeAsk reads AskAnnotation's value.
func DecodeAsk(value string) (Ask, error) {
	var a Ask
	return a, decode(AskAnnotation, value, &a, func() error { return a.validate() })
}

func (a Ask) validate() error {
	u, err := url.Parse(a.URL)
	switch {
	case err != nil:
		return fmt.Errorf("url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("url %q: not an http or https URL with a host", a.URL)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("url %q: a base URL has no user, query or fragment", a.URL)
	case len(a.URL) > 0 && a.URL[len(a.URL)-1] == '/':
		return fmt.Errorf("url %q: no trailing slash (artifacts are fetched at url/%s)", a.URL, netboot.Kernel)
	}
	return errors.Join(checkRequest(a.Request), match("kilnSHA256", a.KilnSHA256, sha256RE, "64 lower-case hex digits"),
		match("kubernetes", a.Kubernetes, releaseRE, "a release such as v1.37.1"),
		match("artifacts."+netboot.Kernel, a.Artifacts.Kernel, sha256RE, "64 lower-case hex digits"),
		match("artifacts."+netboot.Initrd, a.Artifacts.Initrd, sha256RE, "64 lower-case hex digits"),
		match("artifacts."+netboot.Rootfs, a.Artifacts.Rootfs, sha256RE, "64 lower-case hex digits"),
		checkArgs(a.Args))
}

func checkArgs(args []string) error {
	if err := bootslot.CheckArgs(args); err != nil {
		return fmt.Errorf("args: %w", err)
	}
	return nil
}

// EncodeStaged is StagedAnnotation's value for the ask request.
func EncodeStaged(request string) (string, error) {
	if err := checkRequest(request); err != nil {
		return "", fmt.Errorf("%s: %w: %w", StagedAnnotation, ErrMalformed, err)
	}
	return request, nil
}

// DecodeStaged reads StagedAnnotation's value: the request ID staged.
func DecodeStaged(value string) (string, error) { return EncodeStaged(value) }

// Encode is the answer's annotation value.
func (f Failed) Encode() (string, error) { return encode(FailedAnnotation, f, f.validate) }

// DecodeFailed reads FailedAnnotation's value.
func DecodeFailed(value string) (Failed, error) {
	var f Failed
	return f, decode(FailedAnnotation, value, &f, func() error { return f.validate() })
}

func (f Failed) validate() error { return errors.Join(checkRequest(f.Request), checkReason(f.Reason)) }

// Encode is the answer's annotation value.
func (r RolledBack) Encode() (string, error) { return encode(RolledBackAnnotation, r, r.validate) }

// DecodeRolledBack reads RolledBackAnnotation's value.
func DecodeRolledBack(value string) (RolledBack, error) {
	var r RolledBack
	return r, decode(RolledBackAnnotation, value, &r, func() error { return r.validate() })
}

func (r RolledBack) validate() error {
	errs := []error{checkRequest(r.Request), checkReason(r.Reason)}
	if _, err := bootslot.ParseSlot(string(r.From)); err != nil {
		errs = append(errs, fmt.Errorf("from: %w", err))
	}
	if _, err := bootslot.ParseSlot(string(r.To)); err != nil {
		errs = append(errs, fmt.Errorf("to: %w", err))
	}
	if r.From != "" && r.From == r.To {
		errs = append(errs, fmt.Errorf("from and to are both slot %s", r.From))
	}
	return errors.Join(errs...)
}

func checkRequest(id string) error {
	return match("request", id, requestRE, "1 to 63 of a-z 0-9 - starting with a letter or digit")
}

// checkReason holds a reason to what a boot-state record keeps
// (bootslot.Reason): one line of at most bootslot.MaxReason bytes.
func checkReason(reason string) error {
	switch {
	case reason == "":
		return errors.New("reason: empty")
	case bootslot.Reason(reason) != reason:
		return fmt.Errorf("reason %q: not one trimmed line of at most %d bytes", reason, bootslot.MaxReason)
	}
	return nil
}

func match(field, value string, re *regexp.Regexp, want string) error {
	if !re.MatchString(value) {
		return fmt.Errorf("%s %q: want %s", field, value, want)
	}
	return nil
}

func encode(annotation string, v any, validate func() error) (string, error) {
	if err := validate(); err != nil {
		return "", fmt.Errorf("%s: %w: %w", annotation, ErrMalformed, err)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%s: %w", annotation, err)
	}
	return string(data), nil
}

// decode reads value into v, refusing unknown fields, trailing data and
// what validate refuses.
func decode(annotation, value string, v any, validate func() error) error {
	d := json.NewDecoder(bytes.NewReader([]byte(value)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%s: %w: %w", annotation, ErrMalformed, err)
	}
	if d.More() {
		return fmt.Errorf("%s: %w: data after the JSON object", annotation, ErrMalformed)
	}
	if err := validate(); err != nil {
		return fmt.Errorf("%s: %w: %w", annotation, ErrMalformed, err)
	}
	return nil
}
