package source

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"
)

// TFTP opcodes (RFC 1350).
const (
	tftpRRQ   = 1
	tftpDATA  = 3
	tftpACK   = 4
	tftpERROR = 5
	tftpBlock = 512
)

// tftpGet reads one file in octet mode, of at most max bytes. It is
// enough for configs: a read request, then DATA/ACK in lock step from the
// server's transfer port.
func tftpGet(ctx context.Context, u *url.URL, max int64) ([]byte, error) {
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "69")
	}
	server, err := net.ResolveUDPAddr("udp", host)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	name := u.Path
	if len(name) > 0 && name[0] == '/' {
		name = name[1:]
	}
	rrq := append(append([]byte{0, tftpRRQ}, name...), 0)
	rrq = append(append(rrq, "octet"...), 0)
	if _, err := conn.WriteToUDP(rrq, server); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	buf := make([]byte, 4+tftpBlock)
	for want := uint16(1); ; want++ {
		deadline := time.Now().Add(5 * time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		conn.SetReadDeadline(deadline)
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			return nil, fmt.Errorf("tftp %s: %w", u, err)
		}
		op, block := binary.BigEndian.Uint16(buf[0:2]), binary.BigEndian.Uint16(buf[2:4])
		if op == tftpERROR {
			return nil, fmt.Errorf("tftp %s: server error %d: %s", u, block, bytes.TrimRight(buf[4:n], "\x00"))
		}
		if op != tftpDATA || block != want {
			return nil, errors.New("tftp: unexpected packet")
		}
		out.Write(buf[4:n])
		if int64(out.Len()) > max {
			return nil, permanentError{fmt.Errorf("tftp %s: larger than %s", u, sizeString(max))}
		}
		ack := []byte{0, tftpACK, buf[2], buf[3]}
		if _, err := conn.WriteToUDP(ack, from); err != nil {
			return nil, err
		}
		if n-4 < tftpBlock {
			return out.Bytes(), nil
		}
	}
}
