// Holds the ABI's layout rules in place:
//  - every FERRY_*_STRUCT_SIZE macro names the struct's last field, and no
//    struct has tail padding (so adding a field without moving the macro, or
//    a layout hole at the end, fails here);
//  - struct_size is the first field of every struct that has one;
//  - ferry's device codes equal DLPack's.
// It covers both C interfaces: the plugin ABI (transport.h) and the core's
// public API (ferry.h).
#include <ferry/ferry.h>
#include <ferry/transport.h>

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstddef>

static_assert(FERRY_DEVICE_CPU == kDLCPU, "device code must match DLPack");
static_assert(FERRY_DEVICE_CUDA == kDLCUDA, "device code must match DLPack");
static_assert(FERRY_DEVICE_CUDA_HOST == kDLCUDAHost, "device code must match DLPack");
static_assert(FERRY_DEVICE_ROCM == kDLROCM, "device code must match DLPack");
static_assert(FERRY_DEVICE_CUDA_MANAGED == kDLCUDAManaged,
              "device code must match DLPack");
static_assert(sizeof(ferry_device_t) == 8, "ferry_device_t is two int32_t");

#define FERRY_CHECK_STRUCT(type, macro)                                             \
  static_assert(macro == sizeof(type), #macro " must name the last field of " #type \
                                              " (and it has no tail padding)");     \
  static_assert(offsetof(type, struct_size) == 0, "struct_size comes first in " #type)

FERRY_CHECK_STRUCT(ferry_host_services_t, FERRY_HOST_SERVICES_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_error_buf_t, FERRY_ERROR_BUF_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_init_args_t, FERRY_INIT_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_context_info_t, FERRY_CONTEXT_INFO_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_arrival_segment_t, FERRY_ARRIVAL_SEGMENT_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_event_t, FERRY_EVENT_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_progress_args_t, FERRY_PROGRESS_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_listen_args_t, FERRY_LISTEN_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_connect_args_t, FERRY_CONNECT_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_segment_t, FERRY_SEGMENT_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_send_args_t, FERRY_SEND_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_place_dest_t, FERRY_PLACE_DEST_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_place_args_t, FERRY_PLACE_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_reg_args_t, FERRY_REG_ARGS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_transport_vtable_t, FERRY_TRANSPORT_VTABLE_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_negotiate_args_t, FERRY_NEGOTIATE_ARGS_STRUCT_SIZE);

FERRY_CHECK_STRUCT(ferry_worker_options_t, FERRY_WORKER_OPTIONS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_limits_t, FERRY_LIMITS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_member_t, FERRY_MEMBER_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_payload_t, FERRY_PAYLOAD_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_worker_stats_t, FERRY_WORKER_STATS_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_inventory_search_t, FERRY_INVENTORY_SEARCH_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_plugin_info_t, FERRY_PLUGIN_INFO_STRUCT_SIZE);
FERRY_CHECK_STRUCT(ferry_load_failure_t, FERRY_LOAD_FAILURE_STRUCT_SIZE);

// The same facts at run time, so the test report lists them.
TEST(AbiLayout, SizeMacrosNameTheLastField) {
  EXPECT_EQ(FERRY_EVENT_STRUCT_SIZE, sizeof(ferry_event_t));
  EXPECT_EQ(FERRY_TRANSPORT_VTABLE_STRUCT_SIZE, sizeof(ferry_transport_vtable_t));
  EXPECT_EQ(FERRY_NEGOTIATE_ARGS_STRUCT_SIZE, sizeof(ferry_negotiate_args_t));
}

TEST(AbiLayout, FieldPresentFollowsStructSize) {
  ferry_context_info_t info{};
  info.struct_size = offsetof(ferry_context_info_t, domain);  // an older writer
  EXPECT_TRUE(FERRY_FIELD_PRESENT(&info, ferry_context_info_t, priority));
  EXPECT_FALSE(FERRY_FIELD_PRESENT(&info, ferry_context_info_t, domain));
  EXPECT_FALSE(FERRY_FIELD_PRESENT(&info, ferry_context_info_t, description));
}

TEST(AbiLayout, StridedElementAccess) {
  // A reader with a smaller struct walks a writer's larger elements.
  struct Bigger {
    ferry_arrival_segment_t seg;
    uint64_t future_field;
  } array[3] = {};
  for (int i = 0; i < 3; ++i) array[i].seg.length = 100 + i;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(FERRY_ELEMENT_AT(ferry_arrival_segment_t, array, sizeof(Bigger), i)->length,
              uint64_t(100 + i));
  }
}

TEST(AbiLayout, NegotiationHelperChoosesHighestCommonMinor) {
  ferry_transport_vtable_t vt{};
  vt.struct_size = sizeof vt;
  char text[256] = {0};
  ferry_error_buf_t err{sizeof(ferry_error_buf_t), 0, text, sizeof text};
  ferry_negotiate_args_t args{};
  args.struct_size = sizeof args;
  args.abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  args.abi_minor_min = 0;
  args.abi_minor_max = 7;
  args.err = &err;
  ASSERT_EQ(ferry_plugin_negotiate(&args, "x", "1", 1, 3, 0, &vt), FERRY_OK);
  EXPECT_EQ(args.chosen_minor, 3u);
  EXPECT_EQ(args.vtable, &vt);

  args.abi_minor_min = 4;  // host too new
  EXPECT_EQ(ferry_plugin_negotiate(&args, "x", "1", 1, 3, 0, &vt), FERRY_INCOMPATIBLE);
  EXPECT_EQ(args.vtable, nullptr);
  EXPECT_NE(std::string(text).find("no version in common"), std::string::npos) << text;
  EXPECT_EQ(args.plugin_minor_max, 3u);

  args.abi_major = FERRY_TRANSPORT_ABI_MAJOR + 1;
  args.abi_minor_min = 0;
  text[0] = 0;
  EXPECT_EQ(ferry_plugin_negotiate(&args, "x", "1", 1, 3, 0, &vt), FERRY_INCOMPATIBLE);
  EXPECT_NE(std::string(text).find("major"), std::string::npos) << text;
}
