// Grad mode: a thread-local switch; NoGradGuard turns recording off for a scope.
#pragma once

namespace hh {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool on);
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace hh
