// Package qemutests boots the images `kiln build` wrote (KILN_OUT) in QEMU
// and checks what the node did from its serial console. The scenarios run
// only with KILN_QEMU=1 (as `make qemu-test` sets it); plain `go test ./...`
// skips them.
package qemutests
