package source

import (
	"bytes"
	"context"
	"encoding/binary"
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
		data, err := tftpData(buf[:n], want)
		if err != nil {
			return nil, fmt.Errorf("tftp %s: %w", u.Redacted(), err)
		}
		out.Write(data)
		if int64(out.Len()) > max {
			return nil, permanentError{fmt.Errorf("tftp %s: larger than %s", u, sizeString(max))}
		}
		ack := []byte{0, tftpACK, buf[2], buf[3]}
		if _, err := conn.WriteToUDP(ack, from); err != nil {
			return nil, err
		}
		if len(data) < tftpBlock {
			return out.Bytes(), nil
		}
	}
}

// tftpData is the payload of the DATA packet pkt if it is block want;
// any other packet is an error (a server's ERROR with its message).
// pkt comes from whoever answers on the network, so every length is
// checked before it is used.
func tftpData(pkt []byte, want uint16) ([]byte, error) {
	if len(pkt) < 4 {
		return nil, fmt.Errorf("a packet of %d bytes, shorter than a TFTP header", len(pkt))
	}
	op, block := binary.BigEndian.Uint16(pkt[0:2]), binary.BigEndian.Uint16(pkt[2:4])
	switch {
	case op == tftpERROR:
		msg := bytes.TrimRight(pkt[4:], "\x00")
		return nil, fmt.Errorf("server error %d: %q", block, msg)
	case op != tftpDATA:
		return nil, fmt.Errorf("unexpected packet (opcode %d)", op)
	case block != want:
		return nil, fmt.Errorf("unexpected block %d (want %d)", block, want)
	case len(pkt)-4 > tftpBlock:
		return nil, fmt.Errorf("a DATA packet of %d bytes, more than a block", len(pkt)-4)
	}
	return pkt[4:], nil
}
