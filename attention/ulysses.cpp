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

dist::SequenceShards head_shares(int64_t heads, int ranks) {
  check(heads >= ranks,
        "sequence parallel: {} attention heads for {} ranks; every rank needs a head, use at most "
        "{} GPUs",
        heads, ranks, heads);
  return dist::SequenceShards::balanced(heads, ranks);
}

Tensor sequence_to_heads(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group) {
  MMGEN_PROFILE("ulysses: sequence to heads");
  check_group(x, shards, group, "sequence_to_heads");
  const int n = group.size(), me = group.rank();
  const int64_t batch = x.size(0), dim = x.size(3);
  check(x.size(1) == shards.sizes[size_t(me)], "sequence_to_heads: {} rows, the shard holds {}",
        x.size(1), shards.sizes[size_t(me)]);
  const dist::SequenceShards parts = head_shares(x.size(2), n);
  std::vector<Tensor> send;
  for (int j = 0; j < n; ++j) {
    const int64_t first = parts.offsets[size_t(j)], count = parts.sizes[size_t(j)];
    Tensor packed = Tensor::empty({batch, x.size(1), count, dim}, x.dtype(), x.device());
    copy_pitched(packed, x.slice(2, first, first + count));
    send.push_back(packed);
  }
  const Tensor out =
      Tensor::empty({batch, shards.total(), parts.sizes[size_t(me)], dim}, x.dtype(), x.device());
  receive_into_sequence(send, shards, group, out);
  return out;
}

Tensor heads_to_sequence(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group, int64_t heads) {
  MMGEN_PROFILE("ulysses: heads to sequence");
  check_group(x, shards, group, "heads_to_sequence");
  const int n = group.size(), me = group.rank();
  const int64_t batch = x.size(0), dim = x.size(3);
  const dist::SequenceShards parts = head_shares(heads, n);
  check(x.size(1) == shards.total() && x.size(2) == parts.sizes[size_t(me)],
        "heads_to_sequence: {} rows and {} heads, the sequence has {} and this rank's share {}",
        x.size(1), x.size(2), shards.total(), parts.sizes[size_t(me)]);
  const int64_t mine = shards.sizes[size_t(me)];
  std::vector<Tensor> send, recv;
  for (int j = 0; j < n; ++j) {
    const int64_t start = shards.offsets[size_t(j)], rows = shards.sizes[size_t(j)];
    Tensor rows_j = x.slice(1, start, start + rows);
    if (batch > 1) {
      Tensor packed = Tensor::empty(rows_j.shape(), x.dtype(), x.device());
      copy_pitched(packed, rows_j);
      rows_j = packed;
    }
    send.push_back(rows_j);
    recv.push_back(
        Tensor::empty({batch, mine, parts.sizes[size_t(j)], dim}, x.dtype(), x.device()));
  }
  group.all_to_all(send, recv);
  Tensor out = Tensor::empty({batch, mine, heads, dim}, x.dtype(), x.device());
  for (int i = 0; i < n; ++i) {
    const int64_t first = parts.offsets[size_t(i)];
    copy_pitched(out.slice(2, first, first + parts.sizes[size_t(i)]), recv[size_t(i)]);
  }
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
