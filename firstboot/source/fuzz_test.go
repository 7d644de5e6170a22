package source

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A server that answers with a packet shorter than a TFTP header gets an
// error, not a crash of the agent.
func TestTFTPShortPacketIsAnError(t *testing.T) {
	for _, pkt := range [][]byte{{}, {0}, {0, tftpERROR}, {0, tftpDATA, 0}} {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 1024)
			for {
				_, client, err := pc.ReadFromUDP(buf)
				if err != nil {
					return
				}
				pc.WriteToUDP(pkt, client)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = tftpGet(ctx, &url.URL{Scheme: "tftp", Host: pc.LocalAddr().String(), Path: "/cfg.ign"}, DefaultMaxBytes)
		cancel()
		pc.Close()
		if err == nil || !strings.Contains(err.Error(), "shorter than a TFTP header") {
			t.Errorf("packet %v: got %v, want an error naming the short packet", pkt, err)
		}
	}
}

// FuzzTFTPData: any packet from the network is a payload of at most a
// block, or an error; never a panic.
func FuzzTFTPData(f *testing.F) {
	f.Add([]byte{0, tftpDATA, 0, 1, 'h', 'i'}, uint16(1))
	f.Add([]byte{0, tftpERROR, 0, 1, 'n', 'o', 0}, uint16(1))
	f.Add([]byte{0, tftpDATA}, uint16(1))
	f.Add([]byte{}, uint16(7))
	f.Fuzz(func(t *testing.T, pkt []byte, want uint16) {
		data, err := tftpData(pkt, want)
		if err != nil {
			return
		}
		if len(data) > tftpBlock || !bytes.Equal(data, pkt[4:]) {
			t.Fatalf("payload of %d bytes from a packet of %d", len(data), len(pkt))
		}
	})
}

// FuzzCmdlineArg: any kernel command line gives a value that is a
// substring of it, never a panic; the pin parsed from it is a valid
// hash or an error.
func FuzzCmdlineArg(f *testing.F) {
	f.Add("console=ttyS0 kiln.config.hash=sha512-00 ignition.config.url=http://x/y", "kiln.config.hash")
	f.Add("kiln.config.hash=", "kiln.config.hash")
	f.Add(" = == ", "")
	f.Fuzz(func(t *testing.T, cmdline, key string) {
		v := CmdlineArg(cmdline, key)
		if !strings.Contains(cmdline, v) {
			t.Fatalf("value %q is not in the command line %q", v, cmdline)
		}
	})
}
