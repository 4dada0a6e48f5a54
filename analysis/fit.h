// Least squares, once: the linear solver and the weighted fits behind the clock alignment
// (analysis/clock.cc), the α-β calibration on a trace (analysis/trace_calibration.cc) and the
// replay calibration on this host (replay/host_calibration.cc).
#pragma once

#include <utility>
#include <vector>

namespace braid::analysis::fit {

using Matrix = std::vector<std::vector<double>>;

// Solves A X = B for X, in place of B (B may have several columns), by Gaussian elimination with
// partial pivoting. An unknown whose pivot is below `tiny` in magnitude is not determined by the
// system: its row of B becomes 0. Returns how many such unknowns there were (0: solved).
int solve_linear(Matrix a, Matrix& b, double tiny);

// The normal equations of min Σ w_i (x_i · p - y_i)²: A = Σ w x xᵀ, b = Σ w x y (b as a
// one-column matrix, for solve_linear).
std::pair<Matrix, Matrix> normal_equations(const Matrix& x, const std::vector<double>& y,
                                           const std::vector<double>& w);

// Weighted least squares by the normal equations; parameters marked in `fixed_zero` are held at
// 0, and a parameter the data do not determine comes out 0.
std::vector<double> least_squares(const Matrix& x, const std::vector<double>& y,
                                  const std::vector<double>& w, std::vector<bool> fixed_zero);

// Least squares with non-negative parameters (all but the first when it is an intercept):
// refits with a parameter pinned at 0 while any comes out negative.
std::vector<double> nonneg_least_squares(const Matrix& x, const std::vector<double>& y,
                                         const std::vector<double>& w, bool intercept);

}  // namespace braid::analysis::fit
