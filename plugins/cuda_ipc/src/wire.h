// The cuda_ipc wire format on a connection's Unix socket. Both ends are on
// one host (the domain says so), so fields are in native byte order and
// structs are sent as they are (static_asserts pin their layout).
//
// Every frame is a FrameHead and `body_len` bytes:
//   kMsg  a message: SegDesc[num_segments], the header (header_len bytes),
//         then the bytes of every host segment, in segment order. Device
//         segments carry no bytes: their SegDesc names an IPC memory handle,
//         the offset into that allocation, its buffer id and an event slot.
//   kAck  the receiver is done with message `seq`'s device segments (copied
//         or discarded): the sender's bytes are no longer borrowed, its
//         event slots and bounce buffers may be reused. No body.
// A message without device segments is never acknowledged: it is complete
// once written.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry_cuda_ipc::wire {

constexpr uint32_t kMagic = 0x31504943;  // "CIP1": change the digit on a change

constexpr uint16_t kMsg = 1;
constexpr uint16_t kAck = 2;

struct FrameHead {
  uint32_t magic;
  uint16_t type;  // kMsg, kAck
  uint16_t flags;
  uint32_t num_segments;
  uint32_t header_len;
  uint64_t seq;       // the sender's message number (kAck: the one acked)
  uint64_t body_len;  // bytes after this head
};
static_assert(sizeof(FrameHead) == 32, "FrameHead is on the wire");

constexpr uint32_t kSegHost = 1;    // bytes follow in the frame
constexpr uint32_t kSegDevice = 2;  // bytes stay in the sender's device memory

// SegDesc::flags
constexpr uint32_t kEventHandleIncluded = 1;  // `event` is valid: open it

constexpr size_t kIpcHandleSize = 64;  // CU_IPC_HANDLE_SIZE
constexpr size_t kBusIdSize = 16;      // "0000:00:00.0" and a NUL

struct SegDesc {
  uint64_t length;
  uint32_t kind;                      // kSegHost, kSegDevice
  uint32_t flags;                     // kEventHandleIncluded
  int32_t device;                     // the sender's device ordinal
  int32_t event_slot;                 // -1: nothing to wait for
  uint64_t offset;                    // from the allocation's base
  uint64_t buffer_id;                 // CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation
  char bus_id[kBusIdSize];            // the sender's device, by PCI bus id
  unsigned char mem[kIpcHandleSize];  // CUipcMemHandle of the allocation
  unsigned char event[kIpcHandleSize];  // CUipcEventHandle of the slot
  // For a peer in the same process (cuIpcOpenMemHandle refuses those): the
  // allocation's base and the slot's CUevent, used as they are.
  uint64_t sender_base;
  uint64_t sender_event;
};
static_assert(sizeof(SegDesc) == 200, "SegDesc is on the wire");
static_assert(offsetof(SegDesc, mem) % 8 == 0, "SegDesc is on the wire");

}  // namespace ferry_cuda_ipc::wire
