#include "transport/buffers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ferry::bench {

StatusOr<std::unique_ptr<Buffer>> Buffer::Allocate(uint64_t size, uint8_t fill) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t mapped = ((size == 0 ? 1 : size) + page - 1) / page * page;
  void* p =
      mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status(FERRY_RESOURCE_EXHAUSTED, "cannot map a " + std::to_string(mapped) +
                                                "-byte buffer: " + std::strerror(errno) +
                                                "; use smaller --sizes");
  }
  auto* bytes = static_cast<uint8_t*>(p);
  // Writing every byte faults every page in now (and gives the echo check a
  // pattern that a misplaced or truncated segment would break).
  for (uint64_t i = 0; i < mapped; ++i) {
    bytes[i] = static_cast<uint8_t>(i * 131 + fill);
  }
  return std::unique_ptr<Buffer>(new Buffer(bytes, size, mapped));
}

Buffer::~Buffer() {
  munmap(data_, mapped_);
}

StatusOr<BufferSet> AllocateClientBuffers(uint64_t max_size) {
  BufferSet set;
  auto send = Buffer::Allocate(max_size, kMessageFill);
  if (!send.ok()) return send.status();
  auto recv = Buffer::Allocate(max_size, 0);
  if (!recv.ok()) return recv.status();
  set.send = std::move(send).value();
  set.recv.push_back(std::move(recv).value());
  return set;
}

StatusOr<BufferSet> AllocatePeerBuffers(uint64_t max_size, uint32_t ring) {
  BufferSet set;
  auto reply = Buffer::Allocate(max_size, kMessageFill);
  if (!reply.ok()) return reply.status();
  set.reply = std::move(reply).value();
  for (uint32_t i = 0; i < (ring == 0 ? 1 : ring); ++i) {
    auto recv = Buffer::Allocate(max_size, static_cast<uint8_t>(i));
    if (!recv.ok()) return recv.status();
    set.recv.push_back(std::move(recv).value());
  }
  return set;
}

}  // namespace ferry::bench
