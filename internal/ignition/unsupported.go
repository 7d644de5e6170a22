package ignition

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// linuxFilesystemGUID is the partition type kiln gives the state
// partition (sgdisk's 8300).
const linuxFilesystemGUID = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"

// problems collects "field path: reason" lines.
type problems []string

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, path+": "+fmt.Sprintf(format, args...))
}

// unsupported lists, each with its field path, the parts of a config kiln
// does not apply: a node given one says so and changes nothing, rather
// than coming up without them.
func unsupported(c types.Config) []string {
	var p problems
	p.ignitionSection(c.Ignition)
	p.resources(c.Storage)
	p.disks(c.Storage.Disks)
	p.filesystems(c.Storage.Filesystems)
	for i := range c.Storage.Luks {
		p.add(fmt.Sprintf("storage.luks[%d]", i), "LUKS volumes are not applied by kiln (it sets up only its %s partition)", StateLabel)
	}
	for i := range c.Storage.Raid {
		p.add(fmt.Sprintf("storage.raid[%d]", i), "RAID arrays are not applied by kiln (it sets up only its %s partition)", StateLabel)
	}
	if len(c.KernelArguments.ShouldExist)+len(c.KernelArguments.ShouldNotExist) > 0 {
		p.add("kernelArguments", "not applied by kiln (the image is immutable: put kernel arguments in the image spec's kernel.cmdline)")
	}
	return p
}

func (p *problems) ignitionSection(ig types.Ignition) {
	for i := range ig.Config.Merge {
		p.add(fmt.Sprintf("ignition.config.merge[%d]", i), "kiln fetches no other config: give the node one whole config (pinned by kiln.config.hash=)")
	}
	if ig.Config.Replace.Source != nil {
		p.add("ignition.config.replace", "kiln fetches no other config: give the node one whole config (pinned by kiln.config.hash=)")
	}
	if ig.Timeouts.HTTPResponseHeaders != nil || ig.Timeouts.HTTPTotal != nil {
		p.add("ignition.timeouts", "not applied by kiln (a request times out after 30s, a URL after 3 minutes of retries)")
	}
	for i := range ig.Security.TLS.CertificateAuthorities {
		p.add(fmt.Sprintf("ignition.security.tls.certificateAuthorities[%d]", i), "not applied by kiln (https is verified against the system roots plus the image spec's configTrust.caBundles)")
	}
	if ig.Proxy.HTTPProxy != nil || ig.Proxy.HTTPSProxy != nil || len(ig.Proxy.NoProxy) > 0 {
		p.add("ignition.proxy", "not applied by kiln (it fetches without a proxy)")
	}
}

// resources checks what kiln would fetch for files.
func (p *problems) resources(s types.Storage) {
	for i, f := range s.Files {
		p.resource(fmt.Sprintf("storage.files[%d].contents", i), f.Contents)
		for j, a := range f.Append {
			p.resource(fmt.Sprintf("storage.files[%d].append[%d]", i, j), a)
		}
	}
}

func (p *problems) resource(path string, r types.Resource) {
	if len(r.HTTPHeaders) > 0 {
		p.add(path+".httpHeaders", "not sent by kiln")
	}
	if r.Source == nil || *r.Source == "" {
		return
	}
	u, err := url.Parse(*r.Source)
	if err != nil {
		return // the spec's validation reports it
	}
	switch u.Scheme {
	case "data", "http", "https", "tftp":
	default:
		p.add(path+".source", "scheme %q is not supported by kiln (data, http, https, tftp)", u.Scheme)
	}
}

// disks accepts the one partition labelled StateLabel and the disk that
// holds it; kiln partitions nothing else.
func (p *problems) disks(disks []types.Disk) {
	first := ""
	for i, d := range disks {
		disk := fmt.Sprintf("storage.disks[%d]", i)
		if !holdsState(d) {
			p.add(fmt.Sprintf("%s (%s)", disk, d.Device), "only the disk holding the %s partition is applied by kiln", StateLabel)
			continue
		}
		for j, part := range d.Partitions {
			path := fmt.Sprintf("%s.partitions[%d]", disk, j)
			switch {
			case !isState(part):
				p.add(path, "partitions other than %s are not applied by kiln", StateLabel)
			case first != "":
				p.add(path, "a second %s partition (the first is %s)", StateLabel, first)
			default:
				first = path
				p.statePartition(path, part)
			}
		}
	}
}

func holdsState(d types.Disk) bool {
	for _, part := range d.Partitions {
		if isState(part) {
			return true
		}
	}
	return false
}

func isState(part types.Partition) bool { return part.Label != nil && *part.Label == StateLabel }

func (p *problems) statePartition(path string, part types.Partition) {
	if part.GUID != nil {
		p.add(path+".guid", "not applied by kiln")
	}
	if part.TypeGUID != nil && !strings.EqualFold(*part.TypeGUID, linuxFilesystemGUID) {
		p.add(path+".typeGuid", "not applied by kiln (the %s partition is a Linux filesystem, %s)", StateLabel, linuxFilesystemGUID)
	}
	if part.Resize != nil && *part.Resize {
		p.add(path+".resize", "not applied by kiln (it never resizes the %s partition)", StateLabel)
	}
	if part.WipePartitionEntry != nil && *part.WipePartitionEntry {
		p.add(path+".wipePartitionEntry", "not applied by kiln (it never replaces a %s partition)", StateLabel)
	}
	if part.ShouldExist != nil && !*part.ShouldExist {
		p.add(path+".shouldExist", "false is not applied by kiln (the node keeps its state on the %s partition)", StateLabel)
	}
}

// filesystems accepts only a description of the state filesystem as kiln
// makes it: ext4, labelled StateLabel, mounted where kiln mounts it.
func (p *problems) filesystems(fss []types.Filesystem) {
	for i, fs := range fss {
		path := fmt.Sprintf("storage.filesystems[%d]", i)
		if filepath.Clean(fs.Device) != StateDevice {
			p.add(fmt.Sprintf("%s (%s)", path, fs.Device), "filesystems other than the state partition (%s) are not applied by kiln", StateDevice)
			continue
		}
		if fs.Format != nil && *fs.Format != "ext4" {
			p.add(path+".format", "%q is not applied by kiln (the state partition is ext4)", *fs.Format)
		}
		if fs.Label != nil && *fs.Label != StateLabel {
			p.add(path+".label", "%q is not applied by kiln (the state filesystem is labelled %s)", *fs.Label, StateLabel)
		}
		if fs.Path != nil {
			p.add(path+".path", "not applied by kiln (it mounts the state partition itself, at "+StateMountPoint+")")
		}
		if fs.UUID != nil || len(fs.Options) > 0 || len(fs.MountOptions) > 0 {
			p.add(path, "uuid, options and mountOptions are not applied by kiln")
		}
		if fs.WipeFilesystem != nil && *fs.WipeFilesystem {
			p.add(path+".wipeFilesystem", "not applied by kiln (it never reformats a %s filesystem)", StateLabel)
		}
	}
}
