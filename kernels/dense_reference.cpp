#include "kernels/dense_reference.h"

#include <Eigen/Dense>
#include <algorithm>

namespace kvsim::kernels {

namespace {
// Score rows per product (query rows x the query heads of one KV head): bounds the scratch to
// kScoreRows x kv_len scalars per call.
constexpr Eigen::Index kScoreRows = 256;
}  // namespace

template <typename Scalar>
std::vector<float> dense_attention_reference(const dense_sequence& seq, int num_q_heads,
                                             int num_kv_heads, int head_size, float scale) {
  using Mat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;
  using FMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  const int group = num_q_heads / num_kv_heads;
  const Eigen::Index q_len = seq.q_len;
  const Eigen::Index kv_len = seq.kv_len;
  std::vector<float> out(static_cast<std::size_t>(q_len * num_q_heads * head_size), 0.0f);
  if (q_len == 0 || kv_len == 0) return out;
  // Query rows per product: the group's heads of `rows` consecutive tokens, row r * group + g.
  const Eigen::Index rows_per_chunk = std::max<Eigen::Index>(1, kScoreRows / group);
  Mat qs, scores, o;
  Vec sums;
  for (int kvh = 0; kvh < num_kv_heads; ++kvh) {
    // Per-head slices: rows are tokens, strided by the token pitch of the interleaved layout.
    Eigen::Map<const FMat, 0, Stride> kh(seq.k + kvh * head_size, kv_len, head_size,
                                         Stride(num_kv_heads * head_size));
    Eigen::Map<const FMat, 0, Stride> vh(seq.v + kvh * head_size, kv_len, head_size,
                                         Stride(num_kv_heads * head_size));
    const Mat ks = kh.template cast<Scalar>();
    const Mat vs = vh.template cast<Scalar>();
    for (Eigen::Index i0 = 0; i0 < q_len; i0 += rows_per_chunk) {
      const Eigen::Index rows = std::min(rows_per_chunk, q_len - i0);
      // Token i sees keys [0, i + kv_len - q_len]; the chunk's last token sees the most.
      const Eigen::Index keys = std::min(kv_len, i0 + rows + kv_len - q_len);
      if (keys <= 0) continue;  // no token of the chunk sees a key: zeros
      // The group's heads of token i are contiguous in Q: one [group, head_size] block per token.
      qs.resize(rows * group, head_size);
      for (Eigen::Index i = 0; i < rows; ++i)
        qs.middleRows(i * group, group) =
            Eigen::Map<const FMat>(seq.q + ((i0 + i) * num_q_heads + kvh * group) * head_size,
                                   group, head_size)
                .template cast<Scalar>();
      scores.noalias() = qs * ks.topRows(keys).transpose();  // [rows * group, keys]
      scores *= static_cast<Scalar>(scale);
      sums.setZero(rows * group);
      for (Eigen::Index r = 0; r < rows * group; ++r) {
        const Eigen::Index last_visible = i0 + r / group + kv_len - q_len;  // inclusive
        auto row = scores.row(r);
        if (last_visible < 0) {
          row.setZero();
          continue;
        }
        row.tail(keys - 1 - last_visible).setZero();
        auto seen = row.head(last_visible + 1);
        const Scalar mx = seen.maxCoeff();
        seen = (seen.array() - mx).exp().matrix();
        sums(r) = seen.sum();
      }
      o.noalias() = scores * vs.topRows(keys);  // [rows * group, head_size]
      for (Eigen::Index r = 0; r < rows * group; ++r) {
        if (sums(r) == Scalar(0)) continue;
        const Eigen::Index h = kvh * group + r % group;
        for (int c = 0; c < head_size; ++c)
          out[static_cast<std::size_t>(((i0 + r / group) * num_q_heads + h) * head_size + c)] =
              static_cast<float>(o(r, c) / sums(r));
      }
    }
  }
  return out;
}

template std::vector<float> dense_attention_reference<float>(const dense_sequence&, int, int, int,
                                                             float);
template std::vector<float> dense_attention_reference<double>(const dense_sequence&, int, int, int,
                                                              float);

}  // namespace kvsim::kernels
