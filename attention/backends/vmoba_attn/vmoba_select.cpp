#include "attention/backends/vmoba_attn/vmoba_select.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <limits>

#include "core/error.h"

namespace mmgen::attention::vmoba {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedConst = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

// Upstream's guards: a normalisation range at or below it counts as 1; it is added to the total
// mass before dividing.
constexpr double kEps = 1e-6;

// One (query, chunk) score of a group; `id` encodes the query (and head) and the chunk.
struct Entry {
  float value;
  uint32_t id;
};

// Descending by value, ties by lower id: a total order, so the selection is deterministic. A
// function object (not a function pointer) so the sorts inline it.
struct RanksBefore {
  bool operator()(const Entry& a, const Entry& b) const {
    return a.value > b.value || (a.value == b.value && a.id < b.id);
  }
};
constexpr RanksBefore ranks_before{};

// Moves the `count` best entries to the front (unordered); returns how many that is.
size_t take_best(std::vector<Entry>& entries, size_t count) {
  if (count >= entries.size()) return entries.size();
  std::nth_element(entries.begin(), entries.begin() + std::ptrdiff_t(count), entries.end(),
                   ranks_before);
  return count;
}

// The shortest run of best entries whose summed value reaches `target` (at least one entry), moved
// to the front; all entries when the sum never reaches it. Expected linear time: quickselect
// halves the candidate range, keeping the sum of everything known to rank ahead of it.
size_t take_until_mass(std::vector<Entry>& entries, double target) {
  size_t lo = 0, hi = entries.size();
  if (hi == 0) return 0;
  bool bounded = false;  // whether the sum of entries [0, hi) is known to reach the target
  double before = 0;     // sum of entries [0, lo)
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(entries.begin() + std::ptrdiff_t(lo), entries.begin() + std::ptrdiff_t(mid),
                     entries.begin() + std::ptrdiff_t(hi), ranks_before);
    double run = 0;
    for (size_t i = lo; i < mid; ++i) run += entries[i].value;
    if (before + run >= target) {
      hi = mid;
      bounded = true;
    } else {
      before += run;
      lo = mid;
    }
  }
  std::sort(entries.begin() + std::ptrdiff_t(lo), entries.begin() + std::ptrdiff_t(hi),
            ranks_before);
  for (size_t i = lo; i < hi; ++i) {
    before += entries[i].value;
    if (before >= target) return i + 1;
  }
  return bounded ? hi : entries.size();
}

// What threshold mode needs to know about a group before choosing: the normalisation and the
// mass the chosen others must reach.
struct GroupNorm {
  float min = std::numeric_limits<float>::infinity();
  float max = -std::numeric_limits<float>::infinity();
  double scale() const { return double(max) - double(min) <= kEps ? 1.0 : double(max) - min; }
};

// Mass target for the others: need · (total + eps) with need = max(0, threshold − own share).
double mass_target(double total, double own, double threshold) {
  const double need = std::max(0.0, threshold - own / (total + kEps));
  return need * (total + kEps);
}

class Selector {
 public:
  Selector(const Tensor& q, const Tensor& k, const BlockLayout& chunks,
           const SelectOptions& options)
      : q_(q), chunks_(chunks), options_(options) {
    batch_ = q.size(0);
    seq_ = q.size(1);
    heads_ = q.size(2);
    dim_ = q.size(3);
    count_ = chunks.size();
    tokens_ = chunks.size() ? chunks.start.back() + chunks.length.back() : 0;
    check(tokens_ <= seq_ && k.size(1) >= tokens_, "vmoba_attn: chunks cover {} tokens of {}",
          tokens_, seq_);
    own_.resize(size_t(tokens_));
    for (int64_t c = 0; c < count_; ++c)
      for (int64_t i = 0; i < chunks.length[size_t(c)]; ++i)
        own_[size_t(chunks.start[size_t(c)] + i)] = int32_t(c);
    topk_ = std::min<int64_t>(options.topk, count_);
    check(uint64_t(tokens_) * uint64_t(count_) < uint64_t(std::numeric_limits<uint32_t>::max()),
          "vmoba_attn: {} tokens x {} chunks is too many scores for one head; use larger chunks",
          tokens_, count_);
    key_means(k);
  }

  std::vector<ChunkSelection> run() {
    std::vector<std::vector<uint64_t>> pairs(size_t(batch_ * heads_));  // c · tokens + s
    switch (options_.group) {
      case SelectGroup::QueryHead:
        for (int64_t bh = 0; bh < batch_ * heads_; ++bh) pairs[size_t(bh)] = per_query(bh);
        break;
      case SelectGroup::HeadGlobal:
#pragma omp parallel for schedule(dynamic)
        for (int64_t bh = 0; bh < batch_ * heads_; ++bh) pairs[size_t(bh)] = per_head(bh);
        break;
      case SelectGroup::Overall:
        for (int64_t b = 0; b < batch_; ++b) per_batch(b, pairs);
        break;
    }
    std::vector<ChunkSelection> selections(pairs.size());
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < int64_t(pairs.size()); ++bh) {
      auto& list = pairs[size_t(bh)];
      std::sort(list.begin(), list.end());
      ChunkSelection& selection = selections[size_t(bh)];
      selection.indptr.assign(size_t(count_ + 1), 0);
      selection.queries.resize(list.size());
      for (size_t e = 0; e < list.size(); ++e) {
        selection.indptr[size_t(list[e] / uint64_t(tokens_)) + 1]++;
        selection.queries[e] = int32_t(list[e] % uint64_t(tokens_));
      }
      for (int64_t c = 0; c < count_; ++c)
        selection.indptr[size_t(c + 1)] += selection.indptr[size_t(c)];
      list = {};
    }
    return selections;
  }

 private:
  // Mean key of every chunk, per (batch, head), accumulated in double.
  void key_means(const Tensor& k) {
    means_.assign(size_t(batch_ * heads_), RowMatrix());
    for (RowMatrix& means : means_) means.resize(count_, dim_);  // every entry is written below
    const int64_t row = heads_ * dim_, kv_len = k.size(1);
    const float* data = k.data<float>();
    // One job per (batch, head, chunk): a single head still spreads over the threads.
#pragma omp parallel for schedule(dynamic)
    for (int64_t job = 0; job < batch_ * heads_ * count_; ++job) {
      const int64_t bh = job / count_, c = job % count_, b = bh / heads_, h = bh % heads_;
      std::vector<double> sum(static_cast<size_t>(dim_), 0.0);
      const int64_t start = chunks_.start[size_t(c)], length = chunks_.length[size_t(c)];
      for (int64_t s = start; s < start + length; ++s) {
        const float* x = data + (b * kv_len + s) * row + h * dim_;
        for (int64_t d = 0; d < dim_; ++d) sum[size_t(d)] += x[d];
      }
      for (int64_t d = 0; d < dim_; ++d)
        means_[size_t(bh)](c, d) = length ? float(sum[size_t(d)] / double(length)) : 0.0f;
    }
  }

  // Scores of one (batch, head): [tokens, chunks], q · mean key (no scale).
  RowMatrix gate(int64_t bh) const {
    const int64_t b = bh / heads_, h = bh % heads_;
    StridedConst queries(q_.data<float>() + b * seq_ * heads_ * dim_ + h * dim_, tokens_, dim_,
                         Eigen::OuterStride<>(heads_ * dim_));
    RowMatrix scores = queries * means_[size_t(bh)].transpose();
    return scores;
  }

  uint64_t key(int64_t c, int64_t s) const {
    return uint64_t(c) * uint64_t(tokens_) + uint64_t(s);
  }

  std::vector<uint64_t> per_query(int64_t bh) const {
    const RowMatrix scores = gate(bh);
    std::vector<std::vector<uint64_t>> found(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel
    {
      std::vector<Entry> others;
      auto& mine = found[size_t(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (int64_t s = 0; s < tokens_; ++s) {
        const float* g = scores.data() + s * count_;
        const int32_t own = own_[size_t(s)];
        others.clear();
        size_t chosen = 0;
        if (options_.mode == SelectMode::TopK) {
          for (int64_t c = 0; c < count_; ++c)
            if (c != own) others.push_back({g[c], uint32_t(c)});
          chosen = take_best(others, size_t(topk_ - 1));
        } else {
          GroupNorm norm;
          for (int64_t c = 0; c < count_; ++c) {
            norm.min = std::min(norm.min, g[c]);
            norm.max = std::max(norm.max, g[c]);
          }
          const double scale = norm.scale();
          double total = 0, own_mass = 0;
          for (int64_t c = 0; c < count_; ++c) {
            const float value = float((double(g[c]) - norm.min) / scale);
            total += value;
            if (c == own)
              own_mass = value;
            else
              others.push_back({value, uint32_t(c)});
          }
          chosen = take_until_mass(others, mass_target(total, own_mass, options_.threshold));
        }
        for (size_t e = 0; e < chosen; ++e) mine.push_back(key(others[e].id, s));
      }
    }
    std::vector<uint64_t> all;
    for (auto& part : found) all.insert(all.end(), part.begin(), part.end());
    return all;
  }

  std::vector<uint64_t> per_head(int64_t bh) const {
    const RowMatrix scores = gate(bh);
    std::vector<Entry> others;
    others.reserve(size_t(tokens_ * (count_ - 1)));
    size_t chosen = 0;
    if (options_.mode == SelectMode::TopK) {
      for (int64_t s = 0; s < tokens_; ++s)
        for (int64_t c = 0; c < count_; ++c)
          if (c != own_[size_t(s)]) others.push_back({scores(s, c), uint32_t(s * count_ + c)});
      chosen = take_best(others, size_t((topk_ - 1) * tokens_));
    } else {
      GroupNorm norm{scores.minCoeff(), scores.maxCoeff()};
      const double scale = norm.scale();
      double total = 0, own_mass = 0;
      for (int64_t s = 0; s < tokens_; ++s)
        for (int64_t c = 0; c < count_; ++c) {
          const float value = float((double(scores(s, c)) - norm.min) / scale);
          total += value;
          if (c == own_[size_t(s)])
            own_mass += value;
          else
            others.push_back({value, uint32_t(s * count_ + c)});
        }
      chosen = take_until_mass(others, mass_target(total, own_mass, options_.threshold));
    }
    std::vector<uint64_t> found(chosen);
    for (size_t e = 0; e < chosen; ++e)
      found[e] = key(others[e].id % uint64_t(count_), others[e].id / uint64_t(count_));
    return found;
  }

  void per_batch(int64_t b, std::vector<std::vector<uint64_t>>& pairs) const {
    check(uint64_t(heads_) * uint64_t(tokens_) * uint64_t(count_) <
              uint64_t(std::numeric_limits<uint32_t>::max()),
          "vmoba_attn: moba_threshold_type=overall supports at most 2^32 (head, query, chunk) "
          "scores; use query_head or head_global");
    std::vector<RowMatrix> scores(static_cast<size_t>(heads_));
#pragma omp parallel for schedule(dynamic)
    for (int64_t h = 0; h < heads_; ++h) scores[size_t(h)] = gate(b * heads_ + h);
    std::vector<Entry> others;
    others.reserve(size_t(heads_ * tokens_ * (count_ - 1)));
    auto id = [&](int64_t h, int64_t s, int64_t c) {
      return uint32_t((h * tokens_ + s) * count_ + c);
    };
    size_t chosen = 0;
    if (options_.mode == SelectMode::TopK) {
      for (int64_t h = 0; h < heads_; ++h)
        for (int64_t s = 0; s < tokens_; ++s)
          for (int64_t c = 0; c < count_; ++c)
            if (c != own_[size_t(s)]) others.push_back({scores[size_t(h)](s, c), id(h, s, c)});
      chosen = take_best(others, size_t((topk_ - 1) * tokens_ * heads_));
    } else {
      GroupNorm norm;
      for (const auto& m : scores) {
        norm.min = std::min(norm.min, m.minCoeff());
        norm.max = std::max(norm.max, m.maxCoeff());
      }
      const double scale = norm.scale();
      double total = 0, own_mass = 0;
      for (int64_t h = 0; h < heads_; ++h)
        for (int64_t s = 0; s < tokens_; ++s)
          for (int64_t c = 0; c < count_; ++c) {
            const float value = float((double(scores[size_t(h)](s, c)) - norm.min) / scale);
            total += value;
            if (c == own_[size_t(s)])
              own_mass += value;
            else
              others.push_back({value, id(h, s, c)});
          }
      chosen = take_until_mass(others, mass_target(total, own_mass, options_.threshold));
    }
    for (size_t e = 0; e < chosen; ++e) {
      const uint64_t c = others[e].id % uint64_t(count_), hs = others[e].id / uint64_t(count_);
      const int64_t h = int64_t(hs / uint64_t(tokens_)), s = int64_t(hs % uint64_t(tokens_));
      pairs[size_t(b * heads_ + h)].push_back(key(int64_t(c), s));
    }
  }

  const Tensor& q_;
  const BlockLayout& chunks_;
  SelectOptions options_;
  int64_t batch_ = 0, seq_ = 0, heads_ = 0, dim_ = 0, count_ = 0, tokens_ = 0, topk_ = 1;
  std::vector<int32_t> own_;
  std::vector<RowMatrix> means_;
};

}  // namespace

std::vector<ChunkSelection> select_chunks(const Tensor& q, const Tensor& k,
                                          const BlockLayout& chunks, const SelectOptions& options) {
  check(q.dim() == 4 && k.dim() == 4 && q.is_contiguous() && k.is_contiguous() &&
            q.dtype() == DType::F32 && k.dtype() == DType::F32,
        "vmoba_attn: chunk selection expects contiguous float32 [B, S, H, D] q and k");
  check(options.topk >= 1, "vmoba_attn: top-k must be at least 1");
  return Selector(q, k, chunks, options).run();
}

}  // namespace mmgen::attention::vmoba
