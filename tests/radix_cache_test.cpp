// The radix prefix cache (attention/paged/radix_cache.h): page-aligned matching and insertion,
// node splits on page boundaries, hit accounting, locking, LRU eviction, and — over random
// request streams with shared prefixes — that every page stays either free or cached.
#include "attention/paged/radix_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/test_support.h"

namespace mmgen::attention::paged {
namespace {

std::vector<int64_t> slots_for(PageAllocator& allocator, int64_t count) {
  const int64_t page = allocator.page_size();
  return *allocator.alloc((count + page - 1) / page * page);
}

TEST(RadixCache, MatchesTokenByTokenWithPageSizeOne) {
  PageAllocator allocator(256, 1);
  RadixCache cache(allocator, 1000);
  const std::vector<int64_t> a = {1, 2, 3, 4, 5, 6};
  const auto slots = slots_for(allocator, 6);
  EXPECT_EQ(cache.insert(a, slots), 0);
  auto match = cache.match_prefix(std::vector<int64_t>{1, 2, 3, 9});
  EXPECT_EQ(match.slots, (std::vector<int64_t>(slots.begin(), slots.begin() + 3)));
  EXPECT_EQ(cache.match_prefix(std::vector<int64_t>{7}).length(), 0);
  EXPECT_EQ(cache.stats().lookups, 2);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().hit_tokens, 3);
  // Inserting a sequence that shares 3 tokens reports them as present.
  const auto more = slots_for(allocator, 5);
  EXPECT_EQ(cache.insert(std::vector<int64_t>{1, 2, 3, 7, 8}, more), 3);
  EXPECT_EQ(cache.cached_tokens(), 8);
}

TEST(RadixCache, MatchesAndStoresWholePagesOnly) {
  PageAllocator allocator(256, 4);
  RadixCache cache(allocator, 1000);
  const std::vector<int64_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto slots = slots_for(allocator, 10);
  EXPECT_EQ(cache.insert(a, slots), 0);
  EXPECT_EQ(cache.cached_tokens(), 8);  // the partial third page stays with the request
  EXPECT_EQ(cache.match_prefix(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}).length(), 4);
  EXPECT_EQ(cache.match_prefix(a).length(), 8);
  EXPECT_EQ(cache.match_prefix(std::vector<int64_t>{1, 2, 3}).length(), 0);  // shorter than a page
  EXPECT_EQ(cache.match_prefix(std::vector<int64_t>{1, 2, 3, 5, 5, 6, 7, 8}).length(), 0);
  // A second sequence diverging inside the second page splits after the first page.
  const auto other = slots_for(allocator, 8);
  EXPECT_EQ(cache.insert(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 0}, other), 4);
  EXPECT_EQ(cache.cached_tokens(), 12);
  auto match = cache.match_prefix(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 0, 1});
  ASSERT_EQ(match.length(), 8);
  EXPECT_EQ(match.slots[0], slots[0]);  // the shared first page is the first insert's
  EXPECT_EQ(match.slots[4], other[4]);
}

TEST(RadixCache, EvictsLeastRecentlyUsedUnlockedLeaves) {
  PageAllocator allocator(256, 1);
  RadixCache cache(allocator, 1000);
  const int64_t free_before = allocator.available_tokens();
  cache.insert(std::vector<int64_t>{1, 1, 1}, slots_for(allocator, 3));
  cache.insert(std::vector<int64_t>{2, 2, 2}, slots_for(allocator, 3));
  cache.insert(std::vector<int64_t>{3, 3, 3}, slots_for(allocator, 3));
  cache.match_prefix(std::vector<int64_t>{1, 1, 1});  // now the most recent
  auto locked = cache.match_prefix(std::vector<int64_t>{2, 2});
  cache.lock(locked.last_node);
  EXPECT_EQ(cache.locked_tokens(), 2);
  EXPECT_EQ(cache.evict(3), 3);  // {3,3,3}: oldest unlocked
  EXPECT_EQ(cache.match_prefix(std::vector<int64_t>{3, 3, 3}).length(), 0);
  EXPECT_EQ(cache.evict(100), 4);  // {1,1,1} and the unlocked tail {2} of {2,2,2}
  EXPECT_EQ(cache.match_prefix(std::vector<int64_t>{2, 2, 2}).length(), 2);
  cache.unlock(locked.last_node);
  EXPECT_EQ(cache.evict(100), 2);
  EXPECT_EQ(allocator.available_tokens(), free_before);
  EXPECT_EQ(cache.stats().evicted_tokens, 9);
}

// Random request streams over a few shared prefixes, run the way the runner does it: match,
// lock, allocate the rest, insert, free duplicates and the partial page, unlock, keep the budget.
// Every page is always free, cached or held by the running request.
TEST(RadixCache, KeepsEveryPageAccountedForOverRandomStreams) {
  for (int64_t page_size : {1, 16, 64}) {
    std::mt19937 rng{uint32_t(100 + page_size)};
    PageAllocator allocator(8192, page_size);
    RadixCache cache(allocator, 2000);
    const int64_t capacity = allocator.num_pages() * page_size;
    std::vector<std::vector<int64_t>> stems;
    for (int s = 0; s < 4; ++s) {
      std::vector<int64_t> stem;
      for (int i = 0; i < 40 + s * 30; ++i) stem.push_back(int64_t(rng() % 50));
      stems.push_back(stem);
    }
    int64_t expected_hits = 0;
    for (int step = 0; step < 2000; ++step) {
      std::vector<int64_t> tokens = stems[rng() % stems.size()];
      tokens.resize(tokens.size() - rng() % 20);
      for (int64_t extra = int64_t(rng() % 60); extra > 0; --extra)
        tokens.push_back(int64_t(rng() % 50));
      const int64_t len = int64_t(tokens.size());
      const int64_t cap = (len - 1) / page_size * page_size;
      auto match = cache.match_prefix(std::span<const int64_t>(tokens).first(size_t(cap)));
      ASSERT_EQ(match.length() % page_size, 0);
      expected_hits += match.length() > 0;
      cache.lock(match.last_node);
      std::vector<int64_t> slots = match.slots, fresh;
      const int64_t last = slots.empty() ? -1 : slots.back();
      if (!allocator.alloc_extend(std::vector<int64_t>{match.length()}, std::vector<int64_t>{len},
                                  std::vector<int64_t>{last}, fresh)) {
        cache.evict(len + page_size);
        ASSERT_TRUE(allocator.alloc_extend(std::vector<int64_t>{match.length()},
                                           std::vector<int64_t>{len}, std::vector<int64_t>{last},
                                           fresh));
      }
      slots.insert(slots.end(), fresh.begin(), fresh.end());
      ASSERT_EQ(allocator.available_tokens() + cache.cached_tokens() +
                    int64_t(fresh.size() + page_size - 1) / page_size * page_size,
                capacity);
      const int64_t present = cache.insert(tokens, slots);
      const int64_t aligned = len / page_size * page_size;
      const std::span<const int64_t> all(slots);
      if (present > match.length())
        allocator.free(all.subspan(size_t(match.length()), size_t(present - match.length())));
      if (aligned < len) allocator.free(all.subspan(size_t(aligned)));
      cache.unlock(match.last_node);
      cache.enforce_budget();
      ASSERT_LE(cache.cached_tokens(), 2000);
      ASSERT_EQ(cache.cached_tokens() % page_size, 0);
      ASSERT_EQ(allocator.available_tokens() + cache.cached_tokens(), capacity) << "step " << step;
    }
    EXPECT_EQ(cache.stats().hits, expected_hits);
    EXPECT_GT(cache.stats().hits, 1000) << "page size " << page_size;
    cache.reset();
    EXPECT_EQ(allocator.available_tokens(), capacity);
  }
}

}  // namespace
}  // namespace mmgen::attention::paged
