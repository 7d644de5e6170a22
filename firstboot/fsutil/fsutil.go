// Package fsutil is the old home of internal/atomicfile, kept only until
// firstboot/role (being rewritten) imports atomicfile itself.
//
// Deprecated: use github.com/kiln-project/kiln/internal/atomicfile.
package fsutil

import (
	"os"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// WriteFile is atomicfile.WriteFile.
//
// Deprecated: use atomicfile.WriteFile.
func WriteFile(path string, data []byte, mode os.FileMode, owner *atomicfile.Owner) error {
	return atomicfile.WriteFile(path, data, mode, owner)
}
