#include "attention/ulysses.h"

#include "core/error.h"
#include "core/op_profile.h"
#include "core/pitched_copy.h"

namespace mmgen::attention {
namespace {

void check_group(const Tensor& x, const dist::SequenceShards& shards,
                 const dist::Communicator& group, const char* what) {
  check(x.dim() == 4 && x.is_contiguous(),
        "{}: x must be a contiguous [batch, seq, heads, dim], got {}", what,
        shape_string(x.shape()));
  check(shards.parts() == group.size(), "{}: {} sequence shards for {} ranks", what, shards.parts(),
        group.size());
}

// Rank i's send[me] (its rows of the sequence, [B, s_i, ...rest]) into `out` [B, S, ...rest] at
// rank i's offset. With one batch element the rows land straight in place; with several they
// arrive whole and are copied into their pitched places.
void receive_into_sequence(const std::vector<Tensor>& send, const dist::SequenceShards& shards,
                           dist::Communicator& group, const Tensor& out) {
  const int64_t batch = out.size(0);
  std::vector<Tensor> recv;
  for (int i = 0; i < group.size(); ++i) {
    const Tensor rows = out.slice(1, shards.offsets[size_t(i)],
                                  shards.offsets[size_t(i)] + shards.sizes[size_t(i)]);
    recv.push_back(batch == 1 ? rows : Tensor::empty(rows.shape(), out.dtype(), out.device()));
  }
  group.all_to_all(send, recv);
  if (batch > 1)
    for (int i = 0; i < group.size(); ++i)
      copy_pitched(out.slice(1, shards.offsets[size_t(i)],
                             shards.offsets[size_t(i)] + shards.sizes[size_t(i)]),
                   recv[size_t(i)]);
}

}  // namespace

Tensor sequence_to_heads(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group) {
  MMGEN_PROFILE("ulysses: sequence to heads");
  check_group(x, shards, group, "sequence_to_heads");
  const int n = group.size(), me = group.rank();
  const int64_t batch = x.size(0), heads = x.size(2), dim = x.size(3);
  check(x.size(1) == shards.sizes[size_t(me)], "sequence_to_heads: {} rows, the shard holds {}",
        x.size(1), shards.sizes[size_t(me)]);
  check(heads % n == 0,
        "sequence parallel: {} attention heads do not divide over {} ranks; use a rank count that "
        "divides them",
        heads, n);
  const int64_t part = heads / n;
  std::vector<Tensor> send;
  for (int j = 0; j < n; ++j) {
    Tensor packed = Tensor::empty({batch, x.size(1), part, dim}, x.dtype(), x.device());
    copy_pitched(packed, x.slice(2, j * part, (j + 1) * part));
    send.push_back(packed);
  }
  const Tensor out = Tensor::empty({batch, shards.total(), part, dim}, x.dtype(), x.device());
  receive_into_sequence(send, shards, group, out);
  return out;
}

Tensor heads_to_sequence(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group) {
  MMGEN_PROFILE("ulysses: heads to sequence");
  check_group(x, shards, group, "heads_to_sequence");
  const int n = group.size(), me = group.rank();
  const int64_t batch = x.size(0), part = x.size(2), dim = x.size(3);
  check(x.size(1) == shards.total(), "heads_to_sequence: {} rows for a sequence of {}", x.size(1),
        shards.total());
  const int64_t mine = shards.sizes[size_t(me)];
  std::vector<Tensor> send, recv;
  for (int j = 0; j < n; ++j) {
    const int64_t start = shards.offsets[size_t(j)], rows = shards.sizes[size_t(j)];
    Tensor rows_j = x.slice(1, start, start + rows);
    if (batch > 1) {
      Tensor packed = Tensor::empty({batch, rows, part, dim}, x.dtype(), x.device());
      copy_pitched(packed, rows_j);
      rows_j = packed;
    }
    send.push_back(rows_j);
    recv.push_back(Tensor::empty({batch, mine, part, dim}, x.dtype(), x.device()));
  }
  group.all_to_all(send, recv);
  Tensor out = Tensor::empty({batch, mine, part * n, dim}, x.dtype(), x.device());
  for (int i = 0; i < n; ++i) copy_pitched(out.slice(2, i * part, (i + 1) * part), recv[size_t(i)]);
  return out;
}

Tensor gather_sequence(const Tensor& x, const dist::SequenceShards& shards,
                       dist::Communicator& group) {
  MMGEN_PROFILE("ulysses: gather sequence");
  check(x.dim() == 3 && x.is_contiguous(),
        "gather_sequence: x must be a contiguous [batch, seq, features], got {}",
        shape_string(x.shape()));
  check(shards.parts() == group.size(), "gather_sequence: {} shards for {} ranks", shards.parts(),
        group.size());
  const int64_t batch = x.size(0), features = x.size(2);
  check(x.size(1) == shards.sizes[size_t(group.rank())],
        "gather_sequence: {} rows, the shard holds {}", x.size(1),
        shards.sizes[size_t(group.rank())]);
  const Tensor out = Tensor::empty({batch, shards.total(), features}, x.dtype(), x.device());
  receive_into_sequence(std::vector<Tensor>(size_t(group.size()), x), shards, group, out);
  return out;
}

}  // namespace mmgen::attention
