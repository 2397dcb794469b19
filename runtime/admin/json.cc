#include "runtime/admin/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace mt::runtime::admin {

void JsonWriter::BeforeValue() {
  if (need_comma_) out_.push_back(',');
  need_comma_ = true;
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  need_comma_ = false;
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  out_.push_back('}');
  need_comma_ = true;
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  need_comma_ = false;
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  out_.push_back(']');
  need_comma_ = true;
  return *this;
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  String(key);
  out_.push_back(':');
  need_comma_ = false;  // The value follows without a comma.
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  BeforeValue();
  out_.push_back('"');
  for (const char c : value) {
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\r':
        out_ += "\\r";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out_ += buf;
        } else {
          out_.push_back(c);
        }
    }
  }
  out_.push_back('"');
  return *this;
}

JsonWriter& JsonWriter::Int(std::int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Uint(std::uint64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  out_ += buf;
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
  return *this;
}

namespace {

class FlatParser {
 public:
  explicit FlatParser(std::string_view text) : text_(text) {}

  absl::StatusOr<FlatJson> Parse() {
    FlatJson out;
    SkipSpace();
    if (!Eat('{')) return Error("expected an object");
    SkipSpace();
    if (Eat('}')) return Finish(std::move(out));
    while (true) {
      SkipSpace();
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Eat(':')) return Error("expected ':'");
      SkipSpace();
      absl::StatusOr<JsonScalar> value = ParseScalar();
      if (!value.ok()) return value.status();
      out[*std::move(key)] = *std::move(value);
      SkipSpace();
      if (Eat('}')) return Finish(std::move(out));
      if (!Eat(',')) return Error("expected ',' or '}'");
    }
  }

 private:
  absl::StatusOr<FlatJson> Finish(FlatJson out) {
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters");
    return out;
  }

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed request: ", std::string(what), " at offset ", pos_));
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool EatWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::StatusOr<std::string> ParseString() {
    if (!Eat('"')) return Error("expected a string");
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Error("short \\u escape");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = text_[pos_++];
            code <<= 4;
            if (h >= '0' && h <= '9') {
              code |= static_cast<unsigned>(h - '0');
            } else if (h >= 'a' && h <= 'f') {
              code |= static_cast<unsigned>(h - 'a' + 10);
            } else if (h >= 'A' && h <= 'F') {
              code |= static_cast<unsigned>(h - 'A' + 10);
            } else {
              return Error("bad \\u escape");
            }
          }
          // Requests carry names and messages; a code point beyond one
          // UTF-16 unit is kept as the replacement character.
          if (code >= 0xD800 && code <= 0xDFFF) code = 0xFFFD;
          if (code < 0x80) {
            out.push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (code >> 6)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (code >> 12)));
            out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  absl::StatusOr<JsonScalar> ParseScalar() {
    if (pos_ >= text_.size()) return Error("expected a value");
    const char c = text_[pos_];
    if (c == '"') {
      absl::StatusOr<std::string> s = ParseString();
      if (!s.ok()) return s.status();
      return JsonScalar(*std::move(s));
    }
    if (EatWord("true")) return JsonScalar(true);
    if (EatWord("false")) return JsonScalar(false);
    if (EatWord("null")) return JsonScalar(std::monostate{});
    if (c == '{' || c == '[') return Error("nested values are not accepted");
    // A number: copy its characters so strtod never reads past the text.
    std::size_t end = pos_;
    while (end < text_.size() && end - pos_ < 64 &&
           std::string_view("+-0123456789.eE").find(text_[end]) !=
               std::string_view::npos) {
      ++end;
    }
    const std::string number(text_.substr(pos_, end - pos_));
    char* stop = nullptr;
    const double value = std::strtod(number.c_str(), &stop);
    if (number.empty() || stop != number.c_str() + number.size()) {
      return Error("expected a value");
    }
    pos_ = end;
    return JsonScalar(value);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<FlatJson> ParseFlatJson(std::string_view text) {
  return FlatParser(text).Parse();
}

absl::StatusOr<double> NumberField(const FlatJson& json, std::string_view key,
                                   double absent) {
  auto it = json.find(key);
  if (it == json.end() || std::holds_alternative<std::monostate>(it->second)) {
    return absent;
  }
  if (const double* d = std::get_if<double>(&it->second)) return *d;
  // proto3's JSON form writes 64-bit integers as strings.
  if (const std::string* s = std::get_if<std::string>(&it->second)) {
    char* stop = nullptr;
    const double value = std::strtod(s->c_str(), &stop);
    if (!s->empty() && stop == s->c_str() + s->size()) return value;
  }
  return absl::InvalidArgumentError(absl::StrCat("field ", std::string(key), " must be a number"));
}

absl::StatusOr<bool> BoolField(const FlatJson& json, std::string_view key, bool absent) {
  auto it = json.find(key);
  if (it == json.end() || std::holds_alternative<std::monostate>(it->second)) {
    return absent;
  }
  if (const bool* b = std::get_if<bool>(&it->second)) return *b;
  return absl::InvalidArgumentError(absl::StrCat("field ", std::string(key), " must be a boolean"));
}

}  // namespace mt::runtime::admin
