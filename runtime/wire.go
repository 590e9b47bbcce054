package mpi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame types. See docs/transport.md.
const (
	frameEager uint8 = 1 // header + whole message
	frameRTS   uint8 = 2 // rendezvous request to send: Len is the message length, no payload
	frameCTS   uint8 = 3 // clear to send: ID names the sender's RTS, no payload
	frameData  uint8 = 4 // rendezvous payload: ID names the RTS, Len bytes follow
	frameBye   uint8 = 5 // orderly close: the sender has finalized
	frameFin   uint8 = 6 // shared memory only: the receiver copied the RTS's buffer itself (ID names the RTS)
	// framePut (shared memory only, receiver to sender): write the tail of
	// the RTS's buffer into mine. Len bytes; a putDescSize descriptor
	// follows: pid u64, address u64 (where to write), offset u64 (from
	// where in the sender's buffer).
	framePut uint8 = 7
	// framePutDone (sender to receiver) answers framePut; flagFailed when
	// the write did not happen (the receiver then reads that part itself).
	framePutDone uint8 = 8
)

// Header flags.
const (
	// flagCMA on an RTS (shared memory only): a 16-byte descriptor follows
	// the header, pid u64 and address u64 of the sender's buffer, which the
	// receiver may read with process_vm_readv and answer with FIN.
	flagCMA uint8 = 1
	// flagFailed on a framePutDone: process_vm_writev failed.
	flagFailed uint8 = 2
	// flagWait on a CMA RTS: the sender waits for this send right away
	// (a blocking send), so it will answer a PUT promptly.
	flagWait uint8 = 4
)

// cmaDescSize is the size of the descriptor that follows a flagCMA RTS.
const cmaDescSize = 16

// putDescSize is the size of the descriptor that follows a framePut.
const putDescSize = 24

// headerSize is the fixed size of every frame header.
const headerSize = 32

// maxFrameLen bounds any payload a peer may announce (1 TiB): a corrupt or
// hostile length is refused instead of allocated.
const maxFrameLen = 1 << 40

// header is the fixed binary frame header (little endian):
//
//	0  type   u8
//	1  flags  u8 (0; flagCMA and flagWait on an RTS, flagFailed on a PUTDONE)
//	2  resv   u16 (0)
//	4  ctx    u32  communicator context id
//	8  src    i32  sender's rank in that communicator
//	12 tag    i32
//	16 len    u64  payload length (eager, data) or message length (rts)
//	24 id     u64  rendezvous id (rts, cts, data)
type header struct {
	Type  uint8
	Flags uint8
	Ctx   uint32
	Src   int32
	Tag   int32
	Len   uint64
	ID    uint64
}

// errFrame reports a malformed frame; the link carrying it is dropped.
var errFrame = errors.New("mpi: malformed frame")

func (h *header) encode(b []byte) {
	_ = b[headerSize-1]
	b[0] = h.Type
	b[1], b[2], b[3] = h.Flags, 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.Ctx)
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Src))
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Tag))
	binary.LittleEndian.PutUint64(b[16:], h.Len)
	binary.LittleEndian.PutUint64(b[24:], h.ID)
}

// decodeHeader parses and validates a header. eagerLimit bounds eager
// payloads (they are buffered by the receiver).
func decodeHeader(b []byte, eagerLimit int) (header, error) {
	var h header
	err := h.decode(b, eagerLimit)
	return h, err
}

// decode is decodeHeader into h, which spares the receiving hot path two
// copies of the header.
func (h *header) decode(b []byte, eagerLimit int) error {
	if len(b) < headerSize {
		return fmt.Errorf("%w: short header (%d bytes)", errFrame, len(b))
	}
	h.Type = b[0]
	h.Flags = b[1]
	okFlags := h.Flags == 0 || (h.Type == frameRTS && h.Flags&^(flagCMA|flagWait) == 0) || (h.Type == framePutDone && h.Flags == flagFailed)
	if !okFlags || b[2] != 0 || b[3] != 0 {
		return fmt.Errorf("%w: reserved bytes set", errFrame)
	}
	h.Ctx = binary.LittleEndian.Uint32(b[4:])
	h.Src = int32(binary.LittleEndian.Uint32(b[8:]))
	h.Tag = int32(binary.LittleEndian.Uint32(b[12:]))
	h.Len = binary.LittleEndian.Uint64(b[16:])
	h.ID = binary.LittleEndian.Uint64(b[24:])
	switch h.Type {
	case frameEager:
		if h.Len > uint64(eagerLimit) {
			return fmt.Errorf("%w: eager payload %d over limit %d", errFrame, h.Len, eagerLimit)
		}
		if h.Src < 0 || h.Tag < 0 {
			return fmt.Errorf("%w: negative source or tag", errFrame)
		}
	case frameRTS:
		if h.Len > maxFrameLen || h.Src < 0 || h.Tag < 0 {
			return fmt.Errorf("%w: bad rts", errFrame)
		}
	case frameData, framePut:
		if h.Len > maxFrameLen {
			return fmt.Errorf("%w: data length %d", errFrame, h.Len)
		}
	case frameCTS, frameBye, frameFin, framePutDone:
		if h.Len != 0 {
			return fmt.Errorf("%w: type %d carries no payload", errFrame, h.Type)
		}
	default:
		return fmt.Errorf("%w: unknown type %d", errFrame, h.Type)
	}
	return nil
}
