#include "control/src/mtctl/render.h"

#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace mt::control::mtctl {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

v1::GetInfoResponse SampleInfo() {
  v1::GetInfoResponse info;
  info.set_pid(4242);
  info.set_mt_asyncio_version("0.9.0");
  v1::InterpreterInfo* py = info.mutable_interpreter();
  py->set_implementation("cpython");
  py->set_version("3.14.7");
  py->set_executable("/usr/local/bin/python3.14t");
  py->set_free_threaded(true);
  v1::RuntimeInfo* rt = info.mutable_runtime();
  rt->set_state(v1::RUNTIME_STATE_RUNNING);
  rt->set_live_workers(4);
  rt->mutable_config()->set_worker_threads(4);
  return info;
}

v1::TaskInfo SampleTask(std::uint64_t id, const std::string& name,
                        std::uint64_t busy_ns) {
  v1::TaskInfo t;
  t.set_id(id);
  t.set_name(name);
  t.set_loop_id(1);
  t.set_state(v1::TASK_STATE_WAITING);
  t.set_coroutine("handler");
  t.set_busy_ns(busy_ns);
  t.set_last_worker(-1);
  return t;
}

TEST(RenderTest, StateNamesAreLowerCaseWithoutTheirPrefix) {
  EXPECT_EQ(StateName(v1::RUNTIME_STATE_DRAINING), "draining");
  EXPECT_EQ(StateName(v1::TASK_STATE_WAITING), "waiting");
  EXPECT_EQ(StateName(v1::WORKER_STATE_RUNNING), "running");
}

TEST(RenderTest, InfoSaysProcessInterpreterAndRuntime) {
  std::ostringstream out;
  RenderInfo(SampleInfo(), out);
  const std::string text = out.str();
  EXPECT_TRUE(Has(text, "process      pid 4242, mt_asyncio 0.9.0\n")) << text;
  EXPECT_TRUE(Has(text, "cpython 3.14.7 (free-threaded, GIL disabled)"))
      << text;
  EXPECT_TRUE(Has(text, "runtime      running")) << text;
  EXPECT_TRUE(Has(text, "workers      4 target, 4 live")) << text;
  EXPECT_FALSE(Has(text, "refused      ")) << text;  // No refusals, no lines.
}

TEST(RenderTest, InfoListsAtMostFiveRefusedPeers) {
  v1::GetInfoResponse info = SampleInfo();
  for (int i = 0; i < 7; ++i) {
    v1::PeerRefusals* p = info.mutable_control()->add_refusals();
    p->set_peer("ipv4:10.0.0." + std::to_string(i));
    p->set_refused_connections(3);
    p->set_last_reason("too many connections");
  }
  std::ostringstream out;
  RenderInfo(info, out);
  EXPECT_TRUE(Has(out.str(), "refused      ipv4:10.0.0.4, 3 connections"))
      << out.str();
  EXPECT_FALSE(Has(out.str(), "10.0.0.5")) << out.str();
  EXPECT_TRUE(Has(out.str(), "refused      and 2 more peers\n")) << out.str();
}

TEST(RenderTest, TaskNamesCannotDriveTheTerminal) {
  v1::GetTaskResponse r;
  *r.mutable_task() = SampleTask(7, "evil\x1b]0;owned\x07", 0);
  v1::FrameInfo* f = r.add_stack();
  f->set_file("/srv/app.py");
  f->set_line(12);
  f->set_function("handler");
  r.set_call_graph("* Task(name='evil\x1b[2J')\nsecond line");
  r.add_awaited_by(3);
  std::ostringstream out;
  RenderTask(r, out);
  const std::string text = out.str();
  EXPECT_FALSE(Has(text, "\x1b")) << text;
  EXPECT_TRUE(Has(text, "task 7 evil\\x1b]0;owned\\x07 on loop 1: waiting"))
      << text;
  EXPECT_TRUE(Has(text, "  File \"/srv/app.py\", line 12, in handler\n"))
      << text;
  EXPECT_TRUE(Has(text, "awaited by tasks 3\n")) << text;
  // The graph's own line breaks are kept; what is inside a line is escaped.
  EXPECT_TRUE(Has(text, "\\x1b[2J')\nsecond line\n")) << text;
}

TEST(RenderTest, DiagnosisListsFindingsStacksAndPrimitives) {
  v1::DiagnoseResponse r;
  r.set_tasks_examined(9);
  r.set_spin_window_seconds(0.2);
  r.set_long_steps_recorded(1);
  v1::Finding* step = r.add_findings();
  step->set_kind(v1::FINDING_KIND_LONG_STEP);
  step->set_summary("task 4 'slow\x1b[2J' held worker 1 for at least 150 ms in one step");
  v1::FrameInfo* f = step->add_stack();
  f->set_file("/srv/app.py");
  f->set_line(30);
  f->set_function("crunch");
  v1::Finding* lost = r.add_findings();
  lost->set_kind(v1::FINDING_KIND_LOST_WAKEUP);
  lost->set_summary("task 5 'lost' waits on Future pending that nothing else references");
  *lost->add_tasks() = SampleTask(5, "lost", 0);
  lost->mutable_tasks(0)->set_location("/srv/app.py:12");
  v1::PrimitiveInfo* lock = r.add_primitives();
  lock->set_kind("Lock");
  lock->set_repr("<Lock [locked, waiters:1]>");
  lock->set_holder_task_id(6);
  lock->set_holder_task_name("holder");
  v1::PrimitiveWaiter* w = lock->add_waiters();
  w->set_task_id(7);
  w->set_task_name("waiter");
  w->set_role("acquire");
  std::ostringstream out;
  RenderDiagnosis(r, out);
  const std::string text = out.str();
  EXPECT_FALSE(Has(text, "\x1b")) << text;
  EXPECT_TRUE(Has(text, "LONG STEP    task 4 'slow\\x1b[2J' held worker 1")) << text;
  EXPECT_TRUE(Has(text, "    File \"/srv/app.py\", line 30, in crunch\n")) << text;
  EXPECT_TRUE(Has(text, "LOST WAKEUP  task 5 'lost' waits")) << text;
  EXPECT_TRUE(Has(text, "  task 5 lost at /srv/app.py:12\n")) << text;
  EXPECT_TRUE(Has(text, "6 holder")) << text;
  EXPECT_TRUE(Has(text, "7 waiter (acquire)")) << text;
  EXPECT_TRUE(Has(text, "2 findings in 9 tasks")) << text;

  std::ostringstream healthy;
  RenderDiagnosis(v1::DiagnoseResponse(), healthy);
  EXPECT_TRUE(Has(healthy.str(), "no problems found in 0 tasks")) << healthy.str();
}

TEST(RenderTest, TasksSaysWhenNotAllAreShown) {
  v1::ListTasksResponse r;
  *r.add_tasks() = SampleTask(1, "a", 0);
  *r.add_tasks() = SampleTask(2, "b", 0);
  r.set_total_matching(5);
  std::ostringstream out;
  RenderTasks(r, /*wide=*/false, out);
  EXPECT_TRUE(Has(out.str(), "ID")) << out.str();
  EXPECT_TRUE(
      Has(out.str(), "\n2 of 5 tasks shown (--limit N or --all for more)\n"));
  r.set_total_matching(2);
  std::ostringstream all;
  RenderTasks(r, /*wide=*/true, all);
  EXPECT_TRUE(Has(all.str(), "SUSPENDED AT")) << all.str();
  EXPECT_FALSE(Has(all.str(), "tasks shown"));
}

TEST(RenderTest, TopShowsTheBusiestTasksFirst) {
  v1::ListTasksResponse tasks;
  *tasks.add_tasks() = SampleTask(1, "idle", 1000);
  *tasks.add_tasks() = SampleTask(2, "hot", 9000000000);
  tasks.set_total_matching(2);
  std::ostringstream out;
  RenderTop(SampleInfo(), v1::ListWorkersResponse(), tasks, out);
  const std::string text = out.str();
  EXPECT_TRUE(Has(text, "mtctl top - pid 4242 - running")) << text;
  const std::size_t table = text.find("busiest tasks:\n");
  ASSERT_NE(table, std::string::npos) << text;
  EXPECT_LT(text.find(" hot ", table), text.find(" idle ", table)) << text;
}

TEST(RenderTest, WatchCountsUnitsSinceThePreviousUpdate) {
  WatchLines lines(/*loops=*/true);
  v1::WatchUpdate u;
  u.set_sequence(1);
  u.mutable_runtime()->set_state(v1::RUNTIME_STATE_RUNNING);
  v1::WorkerInfo* w = u.mutable_runtime()->add_workers();
  w->set_units_run(100);
  w->set_state(v1::WORKER_STATE_RUNNING);
  u.add_loops()->mutable_tasks()->set_pending(9);
  EXPECT_TRUE(
      Has(lines.Next(u), "#1 running  workers 0 (1 running)  units +0  "));
  u.set_sequence(2);
  w->set_units_run(130);
  u.set_skipped(2);
  const std::string second = lines.Next(u);
  EXPECT_TRUE(Has(second, "units +30")) << second;
  EXPECT_TRUE(Has(second, "  tasks 9  (2 skipped)\n")) << second;
}

TEST(RenderTest, OneLineAnswers) {
  v1::CancelTaskResponse cancelled;
  cancelled.set_cancelled(true);
  EXPECT_EQ(CancelLine(5, cancelled), "task 5: cancel requested\n");
  EXPECT_EQ(CancelLine(5, v1::CancelTaskResponse()),
            "task 5: not cancelled (it is finishing)\n");
  v1::ResizeWorkersResponse resized;
  resized.set_previous(2);
  resized.set_target(8);
  resized.set_live_workers(5);
  EXPECT_EQ(ResizeWorkersLine(resized),
            "workers: 2 -> 8 (5 live, converging)\n");
  v1::DrainResponse drained;
  drained.set_already_draining(true);
  EXPECT_TRUE(
      Has(DrainLine(drained), "draining (already): health is NOT_SERVING"));
  v1::ShutdownProgress p;
  p.set_state(v1::RUNTIME_STATE_DRAINING);
  p.set_elapsed_seconds(1.5);
  p.set_tasks_in_flight(3);
  EXPECT_EQ(
      ShutdownLine(p),
      "   1.50 s  draining    3 units in flight, 0 blocking jobs running\n");
  grpc::health::v1::HealthCheckResponse health;
  health.set_status(grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(HealthLine(health), "NOT_SERVING\n");
}

TEST(RenderTest, JsonKeepsProtoFieldNamesAndDefaults) {
  v1::CancelTaskResponse r;
  const std::string compact = ToJson(r, /*pretty=*/false);
  EXPECT_EQ(compact, "{\"cancelled\":false}");
  EXPECT_TRUE(
      Has(ToJson(SampleInfo(), true), "\"mt_asyncio_version\": \"0.9.0\""));
}

}  // namespace
}  // namespace mt::control::mtctl
