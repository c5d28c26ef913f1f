// A C++ application on the installed ferry SDK: two workers (here in one
// process, for a self-contained check; normally one per process) join a
// job through a store, one calls the other with bytes and a DLPack tensor,
// and the tensor comes back doubled. Prints "cpp-app: ok" on success.
//
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<prefix> && cmake --build build &&
//   build/cpp-app make PKG_CONFIG_PATH=<prefix>/lib/pkgconfig && ./cpp-app
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

namespace {

// A 1-D float32 tensor over `v`, which the caller keeps alive until the
// call returns (ferry sends it without copying).
DLManagedTensor* View(std::vector<float>& v) {
  struct Box {
    DLManagedTensor t{};
    int64_t shape[1];
  };
  auto* b = new Box();
  b->shape[0] = static_cast<int64_t>(v.size());
  b->t.dl_tensor.data = v.data();
  b->t.dl_tensor.device = {kDLCPU, 0};
  b->t.dl_tensor.ndim = 1;
  b->t.dl_tensor.dtype = {kDLFloat, 32, 1};
  b->t.dl_tensor.shape = b->shape;
  b->t.manager_ctx = b;
  b->t.deleter = [](DLManagedTensor* self) {
    delete static_cast<Box*>(self->manager_ctx);
  };
  return &b->t;
}

}  // namespace

int main() try {
  ferry::Worker::Options a;
  a.name = "a";
  a.job = "cpp-app";
  a.transport = "tcp";
  a.store = "127.0.0.1:0";  // a hosts the store on a free port
  a.host_store = true;
  a.elastic = true;
  ferry::Worker wa(a);

  ferry::Worker::Options b = a;
  b.name = "b";
  b.store = wa.store_address();
  b.host_store = false;
  ferry::Worker wb(b);
  wb.Register("double", [](ferry::Call& c, ferry::Message args) {
    DLManagedTensor* t = args.TakeTensor(0);
    auto* x = static_cast<float*>(t->dl_tensor.data);
    for (int64_t i = 0; i < t->dl_tensor.shape[0]; ++i) x[i] *= 2;  // ours now
    ferry::Payload p("doubled for " + std::string(args.bytes()));
    p.Tensor(t);  // handed back: ferry frees it once sent
    c.Reply(std::move(p));
  });
  wa.WaitForWorkers(2, std::chrono::seconds(30));

  std::vector<float> v = {1.5f, 2.5f, 3.5f};
  ferry::Payload p("a");
  p.Tensor(View(v));
  ferry::Message reply = wa.RpcSync("b", "double", std::move(p));
  DLManagedTensor* back = reply.TakeTensor(0);
  const auto* y = static_cast<const float*>(back->dl_tensor.data);
  const bool ok = reply.bytes() == "doubled for a" && back->dl_tensor.shape[0] == 3 &&
                  y[0] == 3.0f && y[1] == 5.0f && y[2] == 7.0f;
  std::printf("cpp-app: %s: [%g %g %g] (%s)\n", ok ? "ok" : "WRONG", y[0], y[1], y[2],
              std::string(reply.bytes()).c_str());
  back->deleter(back);
  wb.Shutdown(std::chrono::seconds(5));
  wa.Shutdown(std::chrono::seconds(5));
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cpp-app: %s\n", e.what());
  return 1;
}
