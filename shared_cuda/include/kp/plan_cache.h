// A per-process cache of launch plans keyed by call signature. A plan's choice costs occupancy and
// cluster queries (cached themselves, but each behind a lock and a map lookup); a signature's plan
// is computed once and later calls with the same signature look it up.
//
// The key is every input the plan reads, as integers: a value the plan reads that the key misses
// would let a call reuse a plan made for another case (kp-norm once skipped a check that way).
// Keep each package's key construction next to its plan function, and put the override
// generation in it when the plan reads overridable values.
#pragma once
#include <cuda_runtime_api.h>
#include <cxxabi.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace kp {

template <typename Plan, size_t N>
class PlanCache {
 public:
  using Key = std::array<int64_t, N>;

  // The plan of `key`, made by `make()` on the first call. References stay valid (node-based map,
  // never erased). `make` runs outside the lock (it may take the occupancy cache's lock); two
  // threads planning one new key at once both compute it and the first insert wins (same value).
  template <typename Make>
  const Plan& get(const Key& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    Plan plan = make();
    std::lock_guard<std::mutex> lock(mu_);
    return map_.emplace(key, std::move(plan)).first->second;
  }

 private:
  struct Hash {
    size_t operator()(const Key& k) const {
      uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
      for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  std::mutex mu_;
  std::unordered_map<Key, Plan, Hash> map_;
};

// A kernel's demangled name, for reports of which kernel a plan chose ("?" if the runtime has none).
inline std::string kernel_name(const void* func) {
  const char* name = nullptr;
  if (!func || cudaFuncGetName(&name, func) != cudaSuccess || !name) {
    (void)cudaGetLastError();
    return "?";
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && demangled ? demangled : name;
  std::free(demangled);
  return out;
}

}  // namespace kp
