// The transformer shape the tests train: 2 blocks of width 16, 2 heads, 8 tokens, fast in fp64.
#pragma once

#include "models/gpt.hpp"

namespace fsdp::test {

inline fsdp_models::GptShape tiny_gpt_shape() {
  fsdp_models::GptShape shape;
  shape.layers = 2;
  shape.hidden = 16;
  shape.heads = 2;
  shape.seq = 8;
  return shape;
}

}  // namespace fsdp::test
