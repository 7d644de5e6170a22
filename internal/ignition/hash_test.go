package ignition

import (
	"strings"
	"testing"
)

func TestVerifyHash(t *testing.T) {
	data := []byte("kiln\n")
	tests := []struct {
		name, want, wantErr string
	}{
		{"sha512 of the data", Hash(data), ""},
		{"sha256 of the data", "sha256-2f8f7d0e8ee6e9ac4b9d8e0e23ed1fa42e7f48be7d2cd4b4abaa81d9c5a5d6a0", "verification failed: the config is sha256-"},
		{"uppercase hex", strings.ToUpper(Hash(data)[:7]) + Hash(data)[7:], "not supported"},
		{"another config", Hash([]byte("other")), "verification failed: the config is sha512-"},
		{"no algorithm", "abcdef", "is not <algo>-<hex>"},
		{"md5", "md5-d41d8cd98f00b204e9800998ecf8427e", `algorithm "md5" is not supported`},
		{"short digest", "sha512-abcd", "not 64 bytes of hex for sha512"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyHash(data, tc.want, "the config")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("VerifyHash = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestHashIsIgnitionsForm(t *testing.T) {
	const empty = "sha512-cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e"
	if got := Hash(nil); got != empty {
		t.Fatalf("Hash(nil) = %s, want %s", got, empty)
	}
}

func TestHashLikeTakesTheSpecsAlgorithm(t *testing.T) {
	data := []byte("kiln\n")
	tests := []struct {
		name, spec, want, wantErr string
	}{
		{"sha512", Hash(nil), Hash(data), ""},
		{"sha256", "sha256-" + strings.Repeat("0", 64), "sha256-ecdcbd502c7c341b7d547760cc09270a43d82db3257b8b0f96e98083e4e5643d", ""},
		{"malformed", "sha512-abcd", "", "not 64 bytes of hex"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HashLike(data, tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("HashLike = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || VerifyHash(data, got, "data") != nil {
				t.Fatalf("HashLike = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
