package ignition

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseAcceptsEverySpecFrom30To35(t *testing.T) {
	for _, v := range []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"} {
		raw := fmt.Sprintf(`{"ignition":{"version":%q},"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,hi"}}]}}`, v)
		cfg, _, err := Parse([]byte(raw))
		if err != nil {
			t.Errorf("spec %s: %v", v, err)
			continue
		}
		if len(cfg.Storage.Files) != 1 || cfg.Storage.Files[0].Path != "/etc/x" {
			t.Errorf("spec %s: translated config lost the file: %+v", v, cfg.Storage)
		}
	}
}

func TestParseRejectsInvalidConfigsWithAReport(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"not JSON", `{"ignition":`, "unexpected end"},
		{"spec 2", `{"ignition":{"version":"2.3.0"}}`, "unsupported config version"},
		{"relative path", `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"etc/x"}]}}`, "$.storage.files.0.path"},
		{"duplicate file", `{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"/a"},{"path":"/a"}]}}`, "duplicate"},
		{"bad hash form", `{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/a","contents":{"source":"data:,x","verification":{"hash":"md5-00"}}}]}}`, "hash"},
		{"unsupported luks", `{"ignition":{"version":"3.5.0"},"storage":{"luks":[{"name":"x","device":"/dev/vda"}]}}`, "storage.luks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, report, err := Parse([]byte(tc.raw))
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want InvalidError", err)
			}
			all := err.Error() + "\n" + strings.Join(report, "\n")
			if !strings.Contains(all, tc.want) {
				t.Fatalf("report does not mention %q:\n%s", tc.want, all)
			}
		})
	}
}
