// A worker's device memory services (device_memory.h).
#include "engine/device_memory.h"

namespace ferry {
namespace {

ferry_device_t ToFerry(DLDevice d) {
  return ferry_device_t{static_cast<int32_t>(d.device_type), d.device_id};
}

}  // namespace

DeviceMemory::DeviceMemory(std::shared_ptr<Transport> transport,
                           const AppDeviceAllocator* app)
    : transport_(std::move(transport)) {
  if (app != nullptr) {
    app_ = *app;
    app_set_ = true;
  }
}

std::string DeviceMemory::transport_name() const {
  return transport_ ? transport_->name() : std::string();
}

std::string DeviceMemory::DeviceName(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost:
      return "cuda_host";
    case kDLCUDAManaged:
      return "cuda_managed:" + std::to_string(d.device_id);
    case kDLROCM:
      return "rocm:" + std::to_string(d.device_id);
    default:
      return "device type " + std::to_string(d.device_type) + ":" +
             std::to_string(d.device_id);
  }
}

StatusOr<void*> DeviceMemory::Alloc(DLDevice device, uint64_t length) {
  if (length == 0) return static_cast<void*>(nullptr);
  const std::string what =
      "cannot allocate " + std::to_string(length) + " bytes on " + DeviceName(device);
  if (app_set_) {
    void* p = app_.alloc(app_.user_data, ToFerry(device), length);
    if (p == nullptr) {
      return Status(FERRY_RESOURCE_EXHAUSTED,
                    what +
                        " for a received tensor: the application's device "
                        "allocator returned NULL");
    }
    return p;
  }
  if (!transport_) {
    return Status(FERRY_FAILED_PRECONDITION,
                  what +
                      ": this worker has no device allocator (load the cuda_ipc "
                      "transport or set ferry_worker_options_t.device_allocator)");
  }
  auto p = transport_->MemAlloc(ToFerry(device), length);
  if (!p.ok()) {
    return Status(FERRY_RESOURCE_EXHAUSTED, what + " for a received tensor (transport '" +
                                                transport_->name() +
                                                "'): " + p.status().message());
  }
  return p.value();
}

void DeviceMemory::Free(DLDevice device, void* data, uint64_t length) {
  if (data == nullptr) return;
  if (app_set_) {
    app_.free(app_.user_data, ToFerry(device), data, length);
  } else if (transport_) {
    transport_->MemFree(ToFerry(device), data);
  }
}

Status DeviceMemory::Copy(void* dst, DLDevice dst_device, const void* src,
                          DLDevice src_device, uint64_t length, uint64_t src_stream) {
  if (length == 0) return Status::Ok();
  if (!transport_) {
    return Status(FERRY_FAILED_PRECONDITION,
                  "cannot copy " + std::to_string(length) + " bytes from " +
                      DeviceName(src_device) + " to " + DeviceName(dst_device) +
                      ": no transport with device memory services is loaded (load "
                      "the cuda_ipc transport)");
  }
  return transport_->MemCopy(dst, ToFerry(dst_device), src, ToFerry(src_device), length,
                             src_stream);
}

}  // namespace ferry
