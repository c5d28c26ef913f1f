// Plugin parameters for one test: set in-process (where they win over the
// environment, and where a context reads them at init()) and cleared again
// when the object goes, so no test leaks settings into the next.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace ferry::testkit {

class ScopedParams {
 public:
  explicit ScopedParams(
      std::string plugin,
      std::initializer_list<std::pair<std::string, std::string>> kv = {});
  ~ScopedParams();
  ScopedParams(const ScopedParams&) = delete;
  ScopedParams& operator=(const ScopedParams&) = delete;

  // Sets `key` for contexts opened after this call.
  void Set(const std::string& key, const std::string& value);

 private:
  std::string plugin_;
  std::vector<std::string> keys_;
};

}  // namespace ferry::testkit
