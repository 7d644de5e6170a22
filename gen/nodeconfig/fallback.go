package nodeconfig

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/ignition"
)

// renderAfter renders node n's config in place of old, the config the
// output directory holds for it (nil: none). A config that differs from
// old names old's hash first in its node file's fallbackConfigs, ahead
// of those old named (nodefile.MaxFallbackConfigs in all): a node that
// runs old may go back to it when the new config fails on it
// (docs/firstboot.md). A config that renders as old did is old, list
// and all. replaced is old's hash when the config changed.
func renderAfter(s *site.Site, st pki.Store, n site.Node, old []byte) (data []byte, replaced string, err error) {
	var kept []string
	if old != nil {
		kept = fallbackConfigs(old)
	}
	data, err = render(s, st, n, kept)
	if err != nil || old == nil || bytes.Equal(data, old) {
		return data, "", err
	}
	replaced = ignition.Hash(old)
	list := append([]string{replaced}, kept...)
	if len(list) > nodefile.MaxFallbackConfigs {
		list = list[:nodefile.MaxFallbackConfigs]
	}
	data, err = render(s, st, n, list)
	return data, replaced, err
}

// readOld is the config at path in the output directory, nil when there
// is none.
func readOld(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the config it replaces: %w", err)
	}
	return data, nil
}

// fallbackConfigs is the list in the node file of a config kiln gen
// rendered; none when it cannot be read (a config of a kiln from before
// the list, or edited by hand): the list then starts anew.
func fallbackConfigs(cfg []byte) []string {
	var c types.Config
	if json.Unmarshal(cfg, &c) != nil {
		return nil
	}
	for _, f := range c.Storage.Files {
		if f.Path != NodeFilePath || f.Contents.Source == nil {
			continue
		}
		enc, ok := strings.CutPrefix(*f.Contents.Source, "data:;base64,")
		if !ok {
			return nil
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil
		}
		var nf nodefile.NodeFile
		if json.Unmarshal(raw, &nf) != nil {
			return nil
		}
		return nf.FallbackConfigs
	}
	return nil
}
