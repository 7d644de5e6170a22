package bootslot

import (
	"strings"
	"testing"
)

func TestEncodeArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{"none", nil, "set kiln_args=''\n", ""},
		{"two", []string{"quiet", "console=ttyS1,115200"}, "set kiln_args='quiet console=ttyS1,115200'\n", ""},
		{"GRUB's specials stay literal", []string{`a=$b\c"d;e`}, "set kiln_args='a=$b\\c\"d;e'\n", ""},
		{"empty", []string{"quiet", ""}, "", "argument 1: an empty argument"},
		{"a space", []string{"a b"}, "", `argument 0: "a b" holds whitespace`},
		{"a newline", []string{"a\nset x=1"}, "", "holds whitespace"},
		{"a control byte", []string{"a\x1bb"}, "", "holds the byte 0x1b"},
		{"not ASCII", []string{"é"}, "", "holds the byte 0xc3"},
		{"a single quote", []string{"a='b'"}, "", "holds a single quote"},
		{"too long", []string{strings.Repeat("x", MaxArgsBytes+1)}, "", "more than 1024"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EncodeArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("EncodeArgs = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("EncodeArgs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
