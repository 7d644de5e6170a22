package smbios

import "testing"

func TestParseUUID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"4c4c4544-0042-3510-8051-b4c04f4e3132", "4c4c4544-0042-3510-8051-b4c04f4e3132", true},
		{"4C4C4544-0042-3510-8051-B4C04F4E3132", "4c4c4544-0042-3510-8051-b4c04f4e3132", true},
		{"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000", true},
		{"", "", false},
		{"4c4c4544004235108051b4c04f4e3132", "", false},
		{"{4c4c4544-0042-3510-8051-b4c04f4e3132}", "", false},
		{"urn:uuid:4c4c4544-0042-3510-8051-b4c04f4e3132", "", false},
		{"4c4c4544-0042-3510-8051-b4c04f4e313", "", false},
		{"4c4c4544-0042-3510-8051-b4c04f4e3132 ", "", false},
		{"4c4c4544_0042-3510-8051-b4c04f4e3132", "", false},
		{"4c4c4544-0042-3510-8051-b4c04f4e313g", "", false},
		{"4c4c45440-042-3510-8051-b4c04f4e3132", "", false},
	} {
		got, ok := ParseUUID(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseUUID(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPlaceholder(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"00000000-0000-0000-0000-000000000000", true},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", true},
		{"03000200-0400-0500-0006-000700080009", true},
		{"4c4c4544-0042-3510-8051-b4c04f4e3132", false},
		{"", false},
	} {
		if got := Placeholder(tc.in); got != tc.want {
			t.Errorf("Placeholder(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
