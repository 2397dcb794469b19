// Microbenchmarks of the runtime core: `bazel run -c opt //runtime:bench`.

#include <atomic>

#include "runtime/testing/notification.h"
#include "benchmark/benchmark.h"
#include "runtime/scheduler/injector.h"
#include "runtime/scheduler/worker_pool.h"

namespace mt::runtime::scheduler {
namespace {

// One push and one pop on the global injector from a single thread.
void BM_InjectorPushPop(benchmark::State& state) {
  Injector injector;
  for (auto _ : state) {
    Unit unit = [] {};
    injector.Push(unit);
    benchmark::DoNotOptimize(injector.TryPop());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InjectorPushPop);

// Spawn a batch of empty units from outside the pool and wait until every
// one has run: throughput of spawn-and-run through the injector.
void BM_SpawnAndRun(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  constexpr int kBatch = 10000;
  WorkerPool pool(workers, "bench", {});
  if (!pool.Start().ok()) {
    state.SkipWithError("pool failed to start");
    return;
  }
  for (auto _ : state) {
    std::atomic<int> left{kBatch};
    testing::Notification done;
    for (int i = 0; i < kBatch; ++i) {
      (void)pool.Spawn([&] {
        if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) done.Notify();
      });
    }
    done.WaitFor(std::chrono::minutes(1));
  }
  pool.Shutdown();
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_SpawnAndRun)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace mt::runtime::scheduler

BENCHMARK_MAIN();
