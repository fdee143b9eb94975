// Distributed tuning: rank 0 is the coordinator. A service thread on rank 0 answers the other
// ranks (a task for each "ready" or result, "stop" when none is left), while rank 0's main
// thread tunes tasks from the same queue, so slow invocations do not hold up a fixed share.
// Tasks travel as JSON (invocation, device, options) and results come back as TuneResult JSON
// with every measurement.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>

#include "ejk/distributed.hpp"
#include "ejk/error.hpp"
#include "mpi/messages.hpp"

namespace ejk {

namespace {

using nlohmann::json;

json timing_json(const TimingOptions& t) {
  return {{"warmup_seconds", t.warmup_seconds}, {"min_samples", t.min_samples},     {"max_samples", t.max_samples},
          {"max_seconds", t.max_seconds},       {"max_spread", t.max_spread},       {"abandon_ratio", t.abandon_ratio},
          {"flush_bytes", t.flush_bytes},       {"max_input_sets", t.max_input_sets}, {"rerank_top", t.rerank_top},
          {"rerank_rounds", t.rerank_rounds}};
}

TimingOptions timing_from(const json& j) {
  TimingOptions t;
  t.warmup_seconds = j.at("warmup_seconds");
  t.min_samples = j.at("min_samples");
  t.max_samples = j.at("max_samples");
  t.max_seconds = j.at("max_seconds");
  t.max_spread = j.at("max_spread");
  t.abandon_ratio = j.at("abandon_ratio");
  t.flush_bytes = j.at("flush_bytes");
  t.max_input_sets = j.at("max_input_sets");
  t.rerank_top = j.at("rerank_top");
  t.rerank_rounds = j.at("rerank_rounds");
  return t;
}

// Everything of TuneOptions but the progress callback, which stays on its rank.
json options_json(const TuneOptions& o) {
  return {{"strategy", to_string(o.strategy)},
          {"evaluations", o.budget.evaluations},
          {"seconds", o.budget.seconds},
          {"target_ns", o.budget.target_ns},
          {"target_within", o.budget.target_within},
          {"seed", o.seed},
          {"input_seed", o.input_seed},
          {"timing", timing_json(o.timing)},
          {"constraints", o.constraints},
          {"validate", o.validate},
          {"reference_flops_limit", o.reference_flops_limit},
          {"isolate", o.isolate},
          {"worker", o.worker},
          {"timeout_floor_seconds", o.timeout_floor_seconds},
          {"timeout_factor", o.timeout_factor}};
}

TuneOptions options_from(const json& j) {
  TuneOptions o;
  o.strategy = parse_strategy(j.at("strategy").get<std::string>());
  o.budget.evaluations = j.at("evaluations");
  o.budget.seconds = j.at("seconds");
  o.budget.target_ns = j.at("target_ns");
  o.budget.target_within = j.at("target_within");
  o.seed = j.at("seed");
  o.input_seed = j.at("input_seed");
  o.timing = timing_from(j.at("timing"));
  o.constraints = j.at("constraints").get<std::vector<std::string>>();
  o.validate = j.at("validate");
  o.reference_flops_limit = j.at("reference_flops_limit");
  o.isolate = j.at("isolate");
  o.worker = j.at("worker");
  o.timeout_floor_seconds = j.at("timeout_floor_seconds");
  o.timeout_factor = j.at("timeout_factor");
  return o;
}

// EJK_TEST_FAIL_RANK=r (rank r throws on every task) or r:die (rank r exits on its first task,
// as a crash would, without finalizing MPI).
struct InjectedFailure {
  int rank = -1;
  bool die = false;
};

InjectedFailure injected_failure() {
  InjectedFailure f;
  const char* s = std::getenv("EJK_TEST_FAIL_RANK");
  if (!s || !*s) return f;
  f.rank = std::atoi(s);
  f.die = std::string_view(s).ends_with(":die");
  return f;
}

// The device this rank tunes a task on (see DistributedTuneOptions::device).
std::shared_ptr<Device> rank_device(const std::string& task_device, const std::string& forced, const MpiSession& s) {
  if (!forced.empty()) return open_device(forced);
  auto dev = open_device(task_device.empty() ? default_device_name() : task_device);
  const DeviceInfo& info = dev->info();
  if (info.backend == Backend::cpu || s.local_size() <= 1) return dev;
  int count = 0;
  for (const auto& d : list_devices())
    if (d.backend == info.backend) ++count;
  if (count <= 1) return dev;
  return open_device(std::string(to_string(info.backend)) + ":" + std::to_string((info.index + s.local_rank()) % count));
}

// Tunes the task a message describes on this rank; a failure becomes an "error" reply.
json tune_task(const json& msg, const MpiSession& s) {
  json reply = {{"task", msg.at("task")}, {"host", s.host()}};
  try {
    if (const InjectedFailure f = injected_failure(); f.rank == s.rank()) {
      if (f.die) std::_Exit(86);
      throw Error("injected failure on rank " + std::to_string(s.rank()) + " (EJK_TEST_FAIL_RANK)");
    }
    auto dev = rank_device(msg.at("device").get<std::string>(), msg.at("device_override").get<std::string>(), s);
    reply["device"] = DeviceRecord::of(dev->info()).to_json();
    TuneResult r = tune(Invocation::from_json(msg.at("invocation")), *dev, options_from(msg.at("options")));
    reply["result"] = r.to_json();
  } catch (const std::exception& e) {
    reply["error"] = e.what();
  }
  return reply;
}

// Rank 0's view of the run: the queue of tasks, what came back, and who failed.
class Coordinator {
 public:
  Coordinator(const MpiSession& s, const std::vector<DistributedTask>& tasks, const DistributedTuneOptions& o,
              const DistributedResultSink& sink)
      : session_(s), tasks_(tasks), sink_(sink), options_(options_json(o.tune)), forced_(o.device) {
    out_.rank = s.rank();
    out_.size = s.size();
    out_.results.resize(tasks.size());
    out_.tasks_per_rank.assign(static_cast<std::size_t>(s.size()), 0);
    failed_.assign(static_cast<std::size_t>(s.size()), 0);
  }

  json message(std::size_t t) const {
    return {{"task", t},
            {"invocation", tasks_[t].invocation.to_json()},
            {"device", tasks_[t].device},
            {"device_override", forced_},
            {"options", options_}};
  }

  // A new task for a rank other than 0; none once the queue is empty or the rank failed.
  std::optional<std::size_t> take_for(int rank) {
    std::lock_guard lock(mutex_);
    if (failed_[static_cast<std::size_t>(rank)] || next_ >= tasks_.size()) return std::nullopt;
    return next_++;
  }

  // Rank 0's next task: a task another rank failed on first, else a new one; waits while
  // other ranks are still busy and may yet fail; none when everything is answered.
  std::optional<std::pair<std::size_t, bool>> take_for_root() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (!redo_.empty()) {
        std::size_t t = redo_.front();
        redo_.pop_front();
        return std::pair{t, true};
      }
      if (next_ < tasks_.size()) return std::pair{next_++, false};
      if (service_done_) return std::nullopt;
      changed_.wait(lock);
    }
  }

  void accept(int rank, const json& reply, bool redone = false) {
    std::lock_guard lock(mutex_);
    const auto t = reply.at("task").get<std::size_t>();
    DistributedResult& r = out_.results.at(t);
    if (reply.contains("error")) {
      std::string what = reply.at("error").get<std::string>();
      if (rank != 0) {
        auto& flag = failed_[static_cast<std::size_t>(rank)];
        if (!flag)
          out_.rank_failures.push_back("rank " + std::to_string(rank) + " on " + reply.value("host", "?") + ": " + what);
        flag = 1;
        r.error = "rank " + std::to_string(rank) + ": " + what;
        redo_.push_back(t);
      } else {
        r.error = (r.error.empty() ? "" : r.error + "; then ") + "rank 0: " + what;
        r.rank = 0;
        if (sink_) sink_(t, r);
      }
    } else {
      r.result = TuneResult::from_json(reply.at("result"));
      r.rank = rank;
      r.host = reply.value("host", "");
      r.device = DeviceRecord::from_json(reply.at("device"));
      r.redone = redone;
      ++out_.tasks_per_rank[static_cast<std::size_t>(rank)];
      if (sink_) sink_(t, r);
    }
    changed_.notify_all();
  }

  void service_finished(std::exception_ptr error) {
    std::lock_guard lock(mutex_);
    service_done_ = true;
    service_error_ = std::move(error);
    changed_.notify_all();
  }

  // Answers the other ranks until each has been told to stop.
  void serve() {
    int active = session_.size() - 1;
    while (active > 0) {
      int flag = 0;
      MPI_Status st;
      mpi::check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st), "MPI_Iprobe");
      if (!flag) {
        // A blocking receive would spin a core that rank 0's own tuning needs.
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      mpi::Message m = mpi::receive(st);
      if (m.tag == mpi::result) accept(m.source, json::parse(m.bytes));
      if (auto t = take_for(m.source)) {
        mpi::send(message(*t).dump(), m.source, mpi::task);
      } else {
        mpi::send(R"({"stop":true})", m.source, mpi::task);
        --active;
      }
    }
  }

  DistributedOutcome finish() {
    std::lock_guard lock(mutex_);
    if (service_error_) std::rethrow_exception(service_error_);
    for (std::size_t t = 0; t < out_.results.size(); ++t)
      if (!out_.results[t].result && out_.results[t].error.empty()) out_.results[t].error = "no rank answered";
    return std::move(out_);
  }

 private:
  const MpiSession& session_;
  const std::vector<DistributedTask>& tasks_;
  const DistributedResultSink& sink_;
  const json options_;
  const std::string forced_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t next_ = 0;
  std::deque<std::size_t> redo_;
  std::vector<char> failed_;  // per rank: failed once, gets no more tasks
  bool service_done_ = false;
  std::exception_ptr service_error_;
  DistributedOutcome out_;
};

void work(const MpiSession& s) {
  mpi::send("{}", 0, mpi::ready);
  for (;;) {
    json msg = json::parse(mpi::receive(0, mpi::task).bytes);
    if (msg.value("stop", false)) return;
    mpi::send(tune_task(msg, s).dump(), 0, mpi::result);
  }
}

}  // namespace

DistributedOutcome tune_distributed(const MpiSession& session, const std::vector<DistributedTask>& tasks,
                                    const DistributedTuneOptions& options, const DistributedResultSink& sink) {
  if (session.rank() != 0) {
    work(session);
    DistributedOutcome out;
    out.rank = session.rank();
    out.size = session.size();
    return out;
  }
  Coordinator c(session, tasks, options, sink);
  std::jthread service([&] {
    std::exception_ptr error;
    try {
      c.serve();
    } catch (...) {
      error = std::current_exception();
    }
    c.service_finished(error);
  });
  while (auto next = c.take_for_root()) {
    const auto [t, redone] = *next;
    c.accept(0, tune_task(c.message(t), session), redone);
  }
  service.join();
  return c.finish();
}

}  // namespace ejk
