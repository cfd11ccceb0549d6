#include "kernels/dense_reference.h"

#include <Eigen/Dense>
#include <limits>

namespace kvsim::kernels {

template <typename Scalar>
std::vector<float> dense_attention_reference(const dense_sequence& seq, int num_q_heads,
                                             int num_kv_heads, int head_size, float scale) {
  using Mat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using FMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  const int group = num_q_heads / num_kv_heads;
  const Eigen::Index q_len = seq.q_len;
  const Eigen::Index kv_len = seq.kv_len;
  std::vector<float> out(static_cast<std::size_t>(q_len * num_q_heads * head_size), 0.0f);
  if (q_len == 0 || kv_len == 0) return out;
  for (int h = 0; h < num_q_heads; ++h) {
    const int kvh = h / group;
    // Per-head slices: rows are tokens, strided by the token pitch of the interleaved layout.
    Eigen::Map<const FMat, 0, Stride> qh(seq.q + h * head_size, q_len, head_size,
                                         Stride(num_q_heads * head_size));
    Eigen::Map<const FMat, 0, Stride> kh(seq.k + kvh * head_size, kv_len, head_size,
                                         Stride(num_kv_heads * head_size));
    Eigen::Map<const FMat, 0, Stride> vh(seq.v + kvh * head_size, kv_len, head_size,
                                         Stride(num_kv_heads * head_size));
    const Mat qs = qh.template cast<Scalar>();
    const Mat ks = kh.template cast<Scalar>();
    const Mat vs = vh.template cast<Scalar>();
    Mat scores = (qs * ks.transpose()) * static_cast<Scalar>(scale);  // [q_len, kv_len]
    Mat o = Mat::Zero(q_len, head_size);
    for (Eigen::Index i = 0; i < q_len; ++i) {
      const Eigen::Index last_visible = i + kv_len - q_len;  // inclusive
      if (last_visible < 0) continue;
      auto row = scores.row(i);
      for (Eigen::Index t = last_visible + 1; t < kv_len; ++t)
        row(t) = -std::numeric_limits<Scalar>::infinity();
      const Scalar mx = row.head(last_visible + 1).maxCoeff();
      row = (row.array() - mx).exp().matrix();  // masked entries become exactly 0
      const Scalar sum = row.sum();
      o.row(i) = (row * vs) / sum;
    }
    for (Eigen::Index i = 0; i < q_len; ++i)
      for (int c = 0; c < head_size; ++c)
        out[static_cast<std::size_t>((i * num_q_heads + h) * head_size + c)] =
            static_cast<float>(o(i, c));
  }
  return out;
}

template std::vector<float> dense_attention_reference<float>(const dense_sequence&, int, int, int,
                                                             float);
template std::vector<float> dense_attention_reference<double>(const dense_sequence&, int, int,
                                                              int, float);

}  // namespace kvsim::kernels
