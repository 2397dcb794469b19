#ifndef MT_RUNTIME_ADMIN_SNAPSHOT_JSON_H_
#define MT_RUNTIME_ADMIN_SNAPSHOT_JSON_H_

#include <string>

#include "runtime/admin/json.h"
#include "runtime/admin/snapshot.h"

namespace mt::runtime::admin {

// The one serialization of a runtime snapshot: the JSON form of
// mt.control.v1.RuntimeInfo (proto field names, enum value names). The
// control service parses it into the message; mt_asyncio.runtime_info()
// parses it into a dict.
std::string RuntimeSnapshotToJson(const RuntimeSnapshot& snap);
// Pieces of it, for documents that embed them (ListWorkers).
void WriteWorker(JsonWriter& json, const WorkerSnapshot& w);
void WriteBlockingPool(JsonWriter& json, const blocking::BlockingPoolStats& b);
void WriteRuntimeInfo(JsonWriter& json, const RuntimeSnapshot& snap);

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_SNAPSHOT_JSON_H_
