#include "analysis/fit.h"

#include <algorithm>
#include <cmath>

namespace braid::analysis::fit {

int solve_linear(Matrix a, Matrix& b, double tiny) {
  const size_t n = a.size();
  std::vector<bool> resolved(n, true);
  int unresolved = 0;
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    if (std::abs(a[c][c]) < tiny) {
      resolved[c] = false;
      ++unresolved;
      continue;
    }
    for (size_t r = 0; r < n; ++r) {
      if (r == c || a[r][c] == 0) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      for (size_t k = 0; k < b[r].size(); ++k) b[r][k] -= f * b[c][k];
    }
  }
  for (size_t r = 0; r < n; ++r)
    for (double& v : b[r]) v = resolved[r] ? v / a[r][r] : 0;
  return unresolved;
}

std::pair<Matrix, Matrix> normal_equations(const Matrix& x, const std::vector<double>& y,
                                           const std::vector<double>& w) {
  const size_t k = x.empty() ? 0 : x[0].size();
  Matrix a(k, std::vector<double>(k, 0)), b(k, std::vector<double>(1, 0));
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t p = 0; p < k; ++p) {
      for (size_t q = 0; q < k; ++q) a[p][q] += w[i] * x[i][p] * x[i][q];
      b[p][0] += w[i] * x[i][p] * y[i];
    }
  return {std::move(a), std::move(b)};
}

std::vector<double> least_squares(const Matrix& x, const std::vector<double>& y,
                                  const std::vector<double>& w, std::vector<bool> fixed_zero) {
  auto [a, b] = normal_equations(x, y, w);
  const size_t k = a.size();
  for (size_t p = 0; p < k; ++p)
    if (p < fixed_zero.size() && fixed_zero[p]) {
      std::fill(a[p].begin(), a[p].end(), 0);
      b[p][0] = 0;
      for (size_t q = 0; q < k; ++q) a[q][p] = 0;
      a[p][p] = 1;
    }
  solve_linear(std::move(a), b, 1e-300);
  std::vector<double> p(k);
  for (size_t i = 0; i < k; ++i) p[i] = b[i][0];
  return p;
}

std::vector<double> nonneg_least_squares(const Matrix& x, const std::vector<double>& y,
                                         const std::vector<double>& w, bool intercept) {
  std::vector<bool> fixed(x.empty() ? 0 : x[0].size(), false);
  for (;;) {
    std::vector<double> p = least_squares(x, y, w, fixed);
    bool again = false;
    for (size_t i = intercept ? 1 : 0; i < p.size(); ++i)
      if (p[i] < 0 && !fixed[i]) {
        fixed[i] = true;
        again = true;
      }
    if (!again) return p;
  }
}

}  // namespace braid::analysis::fit
