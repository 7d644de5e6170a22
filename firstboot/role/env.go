package role

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/catalog"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// nodeEnv is what every unit of the role reads and nothing changes
// during a run: the machine's root, its node file and the image's
// catalog, and the console. It owns the paths under the root (the
// stamps, the etcd data, the backups) and the manifests' parameters.
// The file is shared by pointer, so a unit sees the Node's file as it
// is when the unit runs.
type nodeEnv struct {
	root string
	file *nodefile.NodeFile
	cat  *catalog.Catalog
	log  func(format string, args ...any)
}

func (e nodeEnv) path(p string) string { return filepath.Join(e.root, p) }

// stamped reports whether the one-shot phase at path (master/etcd-join)
// succeeded on an earlier boot.
func (e nodeEnv) stamped(path string) bool { return stampFiles(e.path(StampDir)).Done(path) }

// params are the manifests' parameters for this node with its etcd
// membership (zero for a worker).
func (e nodeEnv) params(m etcdmember.Membership) manifests.Params {
	return manifests.ForNode(*e.file, e.cat.Manifests(), m)
}

// otherMasters are the site's masters other than this node.
func (e nodeEnv) otherMasters() []nodefile.Member {
	var out []nodefile.Member
	for _, m := range e.file.Masters {
		if m.Name != e.file.Name {
			out = append(out, m)
		}
	}
	return out
}

// etcdClientTLS is the client side of every etcd connection a master
// makes: its apiserver-etcd-client pair, trusting only the etcd CA.
func (e nodeEnv) etcdClientTLS() (*tls.Config, error) {
	return etcdmember.ReadClientTLS(e.path(nodefile.PKIDir))
}

func (e nodeEnv) hasEtcdData() bool {
	_, err := os.Stat(e.path(manifests.EtcdDataDir + "/member"))
	return err == nil
}

// BackupDir is where the role moves what it takes out of service: kiln
// never deletes a file it might need back.
const BackupDir = "/var/lib/kiln/backup"

func (e nodeEnv) moveAside(p, what string) error {
	src := e.path(p)
	if _, err := os.Stat(src); os.IsNotExist(err) {
		return nil
	}
	dst := e.path(filepath.Join(BackupDir, fmt.Sprintf("%s.%s", what, time.Now().UTC().Format("20060102T150405Z"))))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("moving %s aside: %w", p, err)
	}
	e.log("moved %s to %s", p, strings.TrimPrefix(dst, e.root))
	return nil
}

// etcdPort is where the masters' etcd listens: configured, or 2379.
func etcdPort(configured int) int {
	if configured == 0 {
		return 2379
	}
	return configured
}
