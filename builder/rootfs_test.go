package builder

import (
	"strings"
	"testing"

	"github.com/kiln-project/kiln/images"
)

// TestAptInstallsWithKilnsDracutModules: the kernel's postinst runs dracut
// with kiln's configuration while apt installs, and dracut fails on a
// module it names but cannot find. Every dracut file the node carries is
// in place before apt runs.
func TestAptInstallsWithKilnsDracutModules(t *testing.T) {
	spec := &images.Spec{}
	spec.Base.Suite, spec.Base.Mirror, spec.Base.Arch = "bookworm", "http://deb.debian.org/debian", "amd64"
	before := map[string]string{}
	for _, f := range aptFiles(spec) {
		before[f.path] = f.data
	}
	for _, f := range nodeFiles() {
		if !strings.HasPrefix(f.path, "/etc/dracut.conf.d/") && !strings.HasPrefix(f.path, "/usr/lib/dracut/modules.d/") {
			continue
		}
		if data, ok := before[f.path]; !ok || data != f.data {
			t.Errorf("%s: not in place, as the node has it, before apt installs the kernel", f.path)
		}
	}
}
