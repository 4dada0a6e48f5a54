// Typed errors with a message a user can act on. CLIs print what() on one line and exit non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace braid {

enum class ErrorCode {
  NotFound,        // a file that does not exist or cannot be opened
  BadFormat,       // malformed or truncated input, or a file that is not what it claims
  Unsupported,     // a valid input of a version or kind this build cannot read
  Empty,           // an input with nothing to import
  Io,              // read/write/rename failures
  Store,           // SQLite errors
  Usage,           // wrong arguments
  Internal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string msg) : std::runtime_error(std::move(msg)), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace braid
