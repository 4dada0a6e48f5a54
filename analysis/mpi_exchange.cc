#include "analysis/mpi_exchange.h"

#include <mpi.h>

#include <climits>

#include "trace/error.h"

namespace braid::analysis {

namespace {

struct MpiLife {
  MpiLife() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
  }
  ~MpiLife() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
};

int count_of(size_t n) {
  if (n > static_cast<size_t>(INT_MAX))
    throw Error(ErrorCode::Unsupported,
                "a message between the analysis processes is over 2 GiB (" + std::to_string(n) +
                    " bytes): run more processes, so that each holds fewer ranks");
  return static_cast<int>(n);
}

class MpiExchange : public Exchange {
 public:
  MpiExchange() {
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_rank(MPI_COMM_WORLD, &index_);
  }
  int size() const override { return size_; }
  int index() const override { return index_; }

  std::vector<std::string> allgather(std::string bytes) override {
    int mine = count_of(bytes.size());
    std::vector<int> counts(size_), at(size_);
    MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    size_t total = 0;
    for (int p = 0; p < size_; ++p) at[p] = count_of(total), total += counts[p];
    std::string all(total, '\0');
    MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), counts.data(), at.data(), MPI_BYTE,
                   MPI_COMM_WORLD);
    std::vector<std::string> out(size_);
    for (int p = 0; p < size_; ++p) out[p] = all.substr(at[p], counts[p]);
    return out;
  }

  std::string broadcast(std::string bytes, int root) override {
    int64_t n = static_cast<int64_t>(bytes.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
    bytes.resize(static_cast<size_t>(n));
    MPI_Bcast(bytes.data(), count_of(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD);
    return bytes;
  }

 private:
  int size_ = 1, index_ = 0;
};

}  // namespace

std::unique_ptr<Exchange> mpi_exchange() {
  static MpiLife life;
  return std::make_unique<MpiExchange>();
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace braid::analysis
