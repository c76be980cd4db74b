#include "engine/experts/disk_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/base/rng.h"

namespace waste {

DiskBench measure_record_reads(const Container& c, int n_reads, int threads, uint64_t seed) {
  std::vector<std::pair<int, int>> order;  // (layer, expert)
  Rng rng(seed);
  std::vector<int> layers;
  for (auto& [l, b] : c.manifest().banks) layers.push_back(l);
  if (layers.empty()) return {};
  for (int i = 0; i < n_reads; i++) {
    int l = layers[rng.below((uint32_t)layers.size())];
    order.push_back({l, (int)rng.below((uint32_t)c.manifest().banks.at(l).experts)});
  }
  std::atomic<size_t> next{0};
  threads = std::max(1, threads);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([&] {
      AlignedBuffer buf(c.bank(layers[0]).stride());
      for (size_t i; (i = next++) < order.size();) {
        const ExpertBank& b = c.bank(order[i].first);
        if (b.stride() > buf.size()) continue;
        b.read(order[i].second, buf.data());
      }
    });
  for (auto& t : pool) t.join();
  DiskBench r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.reads = order.size();
  for (auto& [l, e] : order) r.bytes += c.bank(l).stride();
  return r;
}

}  // namespace waste
