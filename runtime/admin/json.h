#ifndef MT_RUNTIME_ADMIN_JSON_H_
#define MT_RUNTIME_ADMIN_JSON_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"

namespace mt::runtime::admin {

// Writes the JSON documents of the admin boundary (admin_abi.h): compact,
// UTF-8 passed through, control characters escaped, non-finite doubles as
// null. Keys and values are appended in call order; commas are its job.
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Int(std::int64_t value);
  JsonWriter& Uint(std::uint64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);

  // Key(key) followed by the value.
  template <typename T>
  JsonWriter& Field(std::string_view key, T value);

  std::string Take() { return std::move(out_); }

 private:
  void BeforeValue();
  std::string out_;
  bool need_comma_ = false;
};

// A request of the admin boundary: one flat JSON object whose values are
// numbers, booleans, strings or null (nested values are refused).
using JsonScalar = std::variant<std::monostate, double, bool, std::string>;
using FlatJson = std::map<std::string, JsonScalar, std::less<>>;
absl::StatusOr<FlatJson> ParseFlatJson(std::string_view text);

// Typed reads of a FlatJson field: nullopt-like defaults when absent or
// null; InvalidArgument when present with the wrong type.
absl::StatusOr<double> NumberField(const FlatJson& json, std::string_view key,
                                   double absent);
absl::StatusOr<bool> BoolField(const FlatJson& json, std::string_view key,
                               bool absent);

template <typename T>
JsonWriter& JsonWriter::Field(std::string_view key, T value) {
  Key(key);
  if constexpr (std::is_same_v<T, bool>) {
    return Bool(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    return Double(value);
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return Int(value);
  } else if constexpr (std::is_integral_v<T>) {
    return Uint(value);
  } else {
    return String(value);
  }
}

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_JSON_H_
