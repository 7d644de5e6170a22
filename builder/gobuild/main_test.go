package gobuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMainFileNames(t *testing.T) {
	for _, name := range []string{"../x.go", "sub/x.go", "x.txt", "tools.go", "x_test.go"} {
		b := Builder{CacheDir: t.TempDir(), Go: "false"} // never runs: the name fails first
		tg := Target{Name: "x", Module: "example.com/x", Version: "v1.0.0", Main: map[string]string{name: "package main\n"}}
		if _, err := b.Build(context.Background(), tg); err == nil || !strings.Contains(err.Error(), "main file") {
			t.Errorf("main file %q: %v", name, err)
		}
	}
}

// A real build of a Main of kiln's against a small module (already a
// dependency of kiln's tests), beside one of the module's own programs.
func TestBuildRealMain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	b := Builder{CacheDir: t.TempDir(), Log: &bytes.Buffer{}}
	tg := Target{Name: "txtarcat", Module: "github.com/rogpeppe/go-internal", Version: "v1.14.1",
		Packages: []string{"github.com/rogpeppe/go-internal/cmd/txtar-c"},
		LDFlags:  []string{"-X main.greeting=stamped"},
		Main: map[string]string{"main.go": `package main

import (
	"fmt"

	"github.com/rogpeppe/go-internal/txtar"
)

var greeting = "unstamped"

func main() {
	fmt.Print(greeting, " ", string(txtar.Format(&txtar.Archive{Files: []txtar.File{{Name: "f", Data: []byte("x\n")}}})))
}
`}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := b.Build(ctx, tg)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.Log)
	}
	out, err := exec.Command(bins["txtarcat"]).CombinedOutput()
	if err != nil || string(out) != "stamped -- f --\nx\n" {
		t.Errorf("txtarcat: %v: %q", err, out)
	}
	if _, err := os.Stat(bins["txtar-c"]); err != nil {
		t.Error(err)
	}
}
