/* The C API from plain C99: a 2-layer linear model trained through the begin/end calls (in fp64,
 * fp32 and 16-bit mixed precision, with and without a loss scaler), checked against the same
 * training done unsharded by hand on every rank, and the error paths. Run under
 * mpiexec at 1, 2 and 3 ranks; any failed check prints and aborts the whole job (exit code 1),
 * so that no rank is left waiting in a collective. */
#define _POSIX_C_SOURCE 200809L /* getpid */

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsdp/fsdp.h"

static int world_rank = 0;

#define CHECK(condition, ...)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      fprintf(stderr, "test_c_api: rank %d: %s:%d: check failed: %s: ", world_rank, __FILE__, \
              __LINE__, #condition);                                                          \
      fprintf(stderr, __VA_ARGS__);                                                           \
      fprintf(stderr, "\n  fsdp_last_error(): %s\n", fsdp_last_error());                      \
      fflush(stderr);                                                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

#define CHECK_OK(call)                                                                             \
  do {                                                                                             \
    int check_ok_code = (call);                                                                    \
    CHECK(check_ok_code == FSDP_SUCCESS, "%s returned %s", #call, fsdp_error_name(check_ok_code)); \
  } while (0)

#define CHECK_CODE(call, expected)                                        \
  do {                                                                    \
    int check_code = (call);                                              \
    CHECK(check_code == (expected), "%s returned %s, expected %s", #call, \
          fsdp_error_name(check_code), fsdp_error_name(expected));        \
  } while (0)

/* ---- the model: y = W1 (W0 x + b0) + b1, loss = mean over the batch of |y - t|^2 / 2 ---- */
enum { IN = 3, HIDDEN = 5, OUT = 2, BATCH = 2, NPARAM = 4 };
static const char* const parameter_names[NPARAM] = {"l0.w", "l0.b", "l1.w", "l1.b"};
static const int64_t parameter_numel[NPARAM] = {HIDDEN * IN, HIDDEN, OUT* HIDDEN, OUT};
static const char* const unit_order[2] = {"l0", "l1"};

typedef struct {
  double w0[HIDDEN * IN], b0[HIDDEN], w1[OUT * HIDDEN], b1[OUT];
} Parameters;

static double* parameter_of(Parameters* p, int i) {
  double* all[NPARAM] = {p->w0, p->b0, p->w1, p->b1};
  return all[i];
}

/* Rank r's samples at a step: deterministic, different on every rank. */
static void sample(int rank, int step, int k, double x[IN], double t[OUT]) {
  for (int i = 0; i < IN; ++i) {
    x[i] = sin(1.0 + 7.0 * rank + 3.0 * k + 11.0 * step + i);
  }
  for (int j = 0; j < OUT; ++j) {
    t[j] = cos(0.5 * rank + k + 2.0 * step + j);
  }
}

static void initial_parameters(Parameters* p) {
  for (int i = 0; i < NPARAM; ++i) {
    for (int64_t e = 0; e < parameter_numel[i]; ++e) {
      parameter_of(p, i)[e] = 0.3 * sin(1.7 * (double)e + 0.9 * i + 0.2);
    }
  }
}

/* Forward of one layer: out = W in + b (W is rows x cols, row-major). */
static void linear(const double* w, const double* b, const double* in, double* out, int rows,
                   int cols) {
  for (int r = 0; r < rows; ++r) {
    out[r] = b[r];
    for (int c = 0; c < cols; ++c) {
      out[r] += w[r * cols + c] * in[c];
    }
  }
}

/* The gradient of rank `rank`'s batch with respect to p, added into g. */
static void batch_gradient(const Parameters* p, int rank, int step, Parameters* g) {
  for (int k = 0; k < BATCH; ++k) {
    double x[IN], t[OUT], h[HIDDEN], y[OUT], dy[OUT], dh[HIDDEN];
    sample(rank, step, k, x, t);
    linear(p->w0, p->b0, x, h, HIDDEN, IN);
    linear(p->w1, p->b1, h, y, OUT, HIDDEN);
    for (int j = 0; j < OUT; ++j) {
      dy[j] = (y[j] - t[j]) / BATCH;
      g->b1[j] += dy[j];
      for (int c = 0; c < HIDDEN; ++c) {
        g->w1[j * HIDDEN + c] += dy[j] * h[c];
      }
    }
    for (int c = 0; c < HIDDEN; ++c) {
      dh[c] = 0.0;
      for (int j = 0; j < OUT; ++j) {
        dh[c] += p->w1[j * HIDDEN + c] * dy[j];
      }
      g->b0[c] += dh[c];
      for (int i = 0; i < IN; ++i) {
        g->w0[c * IN + i] += dh[c] * x[i];
      }
    }
  }
}

typedef struct {
  int adam; /* 0: SGD with momentum; 1: AdamW */
  double lr, momentum, weight_decay;
} Rule;

/* Unsharded training by hand: the gradient averaged over every rank's batch, then the rule. The
 * batches of step skipped_step (-1: none) are not trained on (an overflow skipped it). */
static void reference_training(Parameters* p, int world, int steps, Rule rule, int skipped_step) {
  Parameters m, v;
  memset(&m, 0, sizeof m);
  memset(&v, 0, sizeof v);
  int taken = 0; /* optimizer steps so far */
  for (int step = 0; step < steps; ++step) {
    if (step == skipped_step) {
      continue;
    }
    Parameters g;
    memset(&g, 0, sizeof g);
    for (int r = 0; r < world; ++r) {
      batch_gradient(p, r, step, &g);
    }
    for (int i = 0; i < NPARAM; ++i) {
      double *w = parameter_of(p, i), *gi = parameter_of(&g, i);
      double *mi = parameter_of(&m, i), *vi = parameter_of(&v, i);
      for (int64_t e = 0; e < parameter_numel[i]; ++e) {
        const double grad = gi[e] / world;
        if (rule.adam) {
          const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
          w[e] *= 1.0 - rule.lr * rule.weight_decay;
          mi[e] = b1 * mi[e] + (1.0 - b1) * grad;
          vi[e] = b2 * vi[e] + (1.0 - b2) * grad * grad;
          const double mhat = mi[e] / (1.0 - pow(b1, taken + 1));
          const double vhat = vi[e] / (1.0 - pow(b2, taken + 1));
          w[e] -= rule.lr * mhat / (sqrt(vhat) + eps);
        } else {
          const double d = grad + rule.weight_decay * w[e];
          mi[e] = taken == 0 ? d : rule.momentum * mi[e] + d;
          w[e] -= rule.lr * mi[e];
        }
      }
    }
    ++taken;
  }
}

/* ---- the same through the C API ---- */
static double get(const void* values, int dtype, int64_t i) {
  return dtype == FSDP_FLOAT32 ? (double)((const float*)values)[i] : ((const double*)values)[i];
}
static void add(void* values, int dtype, int64_t i, double x) {
  if (dtype == FSDP_FLOAT32) {
    ((float*)values)[i] += (float)x;
  } else {
    ((double*)values)[i] += x;
  }
}

/* What a training step through the scopes does beyond the plain step. */
typedef struct {
  double loss_scale; /* every gradient written is multiplied by it (a loss scaler's scale) */
  int poison;        /* nonzero: this rank writes an infinity into element 0 of l0.w's gradient */
  /* Bits of every float fsdp_full gives that must be zero: 0xFFFF for bf16 parameters (the low
   * half of the float), 0x1FFF for fp16 (the 13 mantissa bits fp16 lacks), 0 for fp32. */
  uint32_t zero_bits;
} StepOptions;
static const StepOptions plain_step = {1.0, 0, 0};

/* The bits of fsdp_full's floats that param_dtype rounds away. */
static uint32_t rounded_bits(int param_dtype) {
  return param_dtype == FSDP_BFLOAT16 ? 0xFFFFu : param_dtype == FSDP_FLOAT16 ? 0x1FFFu : 0u;
}

/* The float bits of a 16-bit value: bfloat16 (the upper half of a float), or float16 of a
 * normal number or zero (0xFFFFFFFF for the rest, which the parameters here never are). */
static uint32_t float_bits_of_half(uint16_t half, uint32_t zero_bits) {
  if (zero_bits == 0xFFFFu) {
    return (uint32_t)half << 16;
  }
  const uint32_t sign = (uint32_t)(half & 0x8000u) << 16, exponent = (half >> 10) & 0x1Fu;
  if ((half & 0x7FFFu) == 0) {
    return sign;
  }
  if (exponent == 0 || exponent == 0x1Fu) {
    return 0xFFFFFFFFu;
  }
  return sign | ((exponent + 112u) << 23) | ((uint32_t)(half & 0x3FFu) << 13);
}

/* Reads the parameter as doubles; the float bits in zero_bits must be zero, and with a 16-bit
 * param_dtype (zero_bits nonzero) fsdp_half must give the same values in 16 bits, which are then
 * what the model computes with (widened here, one parameter at a time, as a kernel without a
 * 16-bit GEMM would). */
static void full_parameter(fsdp_runtime_t runtime, int i, int dtype, uint32_t zero_bits,
                           double* out) {
  void* values = NULL;
  int64_t numel = 0;
  CHECK_OK(fsdp_full(runtime, parameter_names[i], &values, &numel));
  CHECK(numel == parameter_numel[i], "%s has %lld elements", parameter_names[i], (long long)numel);
  const uint16_t* halves = NULL;
  int64_t half_numel = 0;
  if (zero_bits != 0) {
    CHECK_OK(fsdp_half(runtime, parameter_names[i], &halves, &half_numel));
    CHECK(half_numel == numel, "fsdp_half: %s has %lld elements", parameter_names[i],
          (long long)half_numel);
  } else {
    CHECK_CODE(fsdp_half(runtime, parameter_names[i], &halves, &half_numel), FSDP_ERROR_STATE);
    CHECK(halves == NULL && half_numel == 0, "fsdp_half refused but gave %p", (const void*)halves);
  }
  for (int64_t e = 0; e < numel; ++e) {
    out[e] = get(values, dtype, e);
    if (zero_bits != 0) {
      uint32_t bits = 0;
      memcpy(&bits, (const float*)values + e, sizeof bits);
      CHECK((bits & zero_bits) == 0, "%s[%lld] = %.9g (bits 0x%08x) is not a 16-bit value",
            parameter_names[i], (long long)e, out[e], (unsigned)bits);
      const uint32_t half_bits = float_bits_of_half(halves[e], zero_bits);
      CHECK(half_bits == bits, "fsdp_half: %s[%lld] = 0x%04x, fsdp_full gives bits 0x%08x",
            parameter_names[i], (long long)e, (unsigned)halves[e], (unsigned)bits);
      float widened = 0.0f;
      memcpy(&widened, &half_bits, sizeof widened);
      out[e] = widened;
    }
  }
}

/* mode: an fsdp_sharding_mode; shard_group_size: -1 for no hybrid sharding; param_dtype,
 * reduce_dtype: the mixed-precision policy (FSDP_FLOAT32: no cast); grad_dtype: the kept
 * gradients' (FSDP_FLOAT32: no cast). */
static fsdp_model_t make_mixed_model(int dtype, const char* strategy, int mode,
                                     int shard_group_size, int param_dtype, int reduce_dtype,
                                     int grad_dtype) {
  fsdp_model_t model = NULL;
  CHECK_OK(fsdp_model_create(dtype, &model));
  CHECK_OK(fsdp_model_set_mode(model, mode));
  CHECK_OK(fsdp_model_set_shard_group_size(model, shard_group_size));
  CHECK_OK(fsdp_model_set_mixed_precision(model, param_dtype, reduce_dtype));
  CHECK_OK(fsdp_model_set_grad_dtype(model, grad_dtype));
  const int64_t shapes[NPARAM][2] = {{HIDDEN, IN}, {HIDDEN, 0}, {OUT, HIDDEN}, {OUT, 0}};
  const int ndims[NPARAM] = {2, 1, 2, 1};
  const char* const layers[NPARAM] = {"l0", "l0", "l1", "l1"};
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(
        fsdp_model_add_parameter(model, parameter_names[i], ndims[i], shapes[i], layers[i], 0));
  }
  /* MPI_Fint, as Fortran passes it: the C side converts with MPI_Comm_f2c. */
  CHECK_OK(fsdp_model_shard(model, MPI_Comm_c2f(MPI_COMM_WORLD), strategy));
  return model;
}

static fsdp_model_t make_model_in_mode(int dtype, const char* strategy, int mode,
                                       int shard_group_size) {
  return make_mixed_model(dtype, strategy, mode, shard_group_size, FSDP_FLOAT32, FSDP_FLOAT32,
                          FSDP_FLOAT32);
}

static fsdp_model_t make_model(int dtype, const char* strategy) {
  return make_model_in_mode(dtype, strategy, FSDP_MODE_FULL_SHARD, -1);
}

static void init_model(fsdp_model_t model, int dtype) {
  Parameters p;
  initial_parameters(&p);
  for (int i = 0; i < NPARAM; ++i) {
    if (dtype == FSDP_FLOAT32) {
      float values[HIDDEN * IN];
      for (int64_t e = 0; e < parameter_numel[i]; ++e) {
        values[e] = (float)parameter_of(&p, i)[e];
      }
      CHECK_OK(fsdp_model_init_from_full(model, parameter_names[i], values));
    } else {
      CHECK_OK(fsdp_model_init_from_full(model, parameter_names[i], parameter_of(&p, i)));
    }
  }
}

/* One training step of this rank's batch through the scopes. */
static void api_step_with(fsdp_runtime_t runtime, int dtype, int rank, int step,
                          const StepOptions* options) {
  Parameters p;
  double x[BATCH][IN], t[BATCH][OUT], h[BATCH][HIDDEN], y[BATCH][OUT];
  for (int k = 0; k < BATCH; ++k) {
    sample(rank, step, k, x[k], t[k]);
  }
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  full_parameter(runtime, 0, dtype, options->zero_bits, p.w0);
  full_parameter(runtime, 1, dtype, options->zero_bits, p.b0);
  for (int k = 0; k < BATCH; ++k) {
    linear(p.w0, p.b0, x[k], h[k], HIDDEN, IN);
  }
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  full_parameter(runtime, 2, dtype, options->zero_bits, p.w1);
  full_parameter(runtime, 3, dtype, options->zero_bits, p.b1);
  for (int k = 0; k < BATCH; ++k) {
    linear(p.w1, p.b1, h[k], y[k], OUT, HIDDEN);
  }
  CHECK_OK(fsdp_end_forward(runtime, "l1"));

  double dh[BATCH][HIDDEN];
  CHECK_OK(fsdp_begin_backward(runtime, "l1"));
  {
    void *gw = NULL, *gb = NULL;
    int64_t n = 0;
    CHECK_OK(fsdp_grad(runtime, "l1.w", &gw, &n));
    CHECK_OK(fsdp_grad(runtime, "l1.b", &gb, &n));
    full_parameter(runtime, 2, dtype, options->zero_bits, p.w1);
    for (int k = 0; k < BATCH; ++k) {
      for (int c = 0; c < HIDDEN; ++c) {
        dh[k][c] = 0.0;
      }
      for (int j = 0; j < OUT; ++j) {
        const double dy = options->loss_scale * (y[k][j] - t[k][j]) / BATCH;
        add(gb, dtype, j, dy);
        for (int c = 0; c < HIDDEN; ++c) {
          add(gw, dtype, j * HIDDEN + c, dy * h[k][c]);
          dh[k][c] += p.w1[j * HIDDEN + c] * dy;
        }
      }
    }
  }
  CHECK_OK(fsdp_end_backward(runtime, "l1"));
  CHECK_OK(fsdp_begin_backward(runtime, "l0"));
  {
    void *gw = NULL, *gb = NULL;
    int64_t n = 0;
    CHECK_OK(fsdp_grad(runtime, "l0.w", &gw, &n));
    CHECK_OK(fsdp_grad(runtime, "l0.b", &gb, &n));
    for (int k = 0; k < BATCH; ++k) {
      for (int c = 0; c < HIDDEN; ++c) {
        add(gb, dtype, c, dh[k][c]);
        for (int i = 0; i < IN; ++i) {
          add(gw, dtype, c * IN + i, dh[k][c] * x[k][i]);
        }
      }
    }
    if (options->poison) {
      add(gw, dtype, 0, INFINITY);
    }
  }
  CHECK_OK(fsdp_end_backward(runtime, "l0"));
  CHECK_OK(fsdp_finish_step(runtime));
}

static void api_step(fsdp_runtime_t runtime, int dtype, int rank, int step) {
  api_step_with(runtime, dtype, rank, step, &plain_step);
}

static void compare(fsdp_model_t model, int dtype, const Parameters* expected, double tolerance,
                    const char* label) {
  double largest = 0.0;
  for (int i = 0; i < NPARAM; ++i) {
    double whole64[HIDDEN * IN];
    float whole32[HIDDEN * IN];
    CHECK_OK(fsdp_model_copy_parameter(model, parameter_names[i],
                                       dtype == FSDP_FLOAT32 ? (void*)whole32 : (void*)whole64));
    for (int64_t e = 0; e < parameter_numel[i]; ++e) {
      const double got = dtype == FSDP_FLOAT32 ? (double)whole32[e] : whole64[e];
      const double want = parameter_of((Parameters*)expected, i)[e];
      const double difference = fabs(got - want) / fmax(1.0, fabs(want));
      largest = fmax(largest, difference);
      CHECK(difference <= tolerance, "%s: %s[%lld] = %.17g, unsharded training gives %.17g", label,
            parameter_names[i], (long long)e, got, want);
    }
  }
  if (world_rank == 0) {
    printf("test_c_api: %s: largest relative difference from unsharded training %.3g\n", label,
           largest);
  }
}

/* A training through the C API, compared with reference_training. */
typedef struct {
  int dtype;
  const char* strategy;
  int mode, shard_group_size;    /* an fsdp_sharding_mode; -1: no hybrid sharding */
  int param_dtype, reduce_dtype; /* the mixed-precision policy; FSDP_FLOAT32: no cast */
  Rule rule;
  int steps, prefetch, limit;
  /* NULL, or a loss scaler: the gradients are scaled, unscaled and checked, and a step that
   * overflows is skipped. */
  fsdp_loss_scaler_t scaler;
  int poisoned_step; /* -1, or the step where the last rank writes an infinity (with a scaler) */
  double tolerance;
  const char* label;
  int grad_dtype; /* of the kept gradients: FSDP_FLOAT32 (no cast) or FSDP_BFLOAT16 */
} Training;

static void train_and_check(const Training* t) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_model_t model = make_mixed_model(t->dtype, t->strategy, t->mode, t->shard_group_size,
                                        t->param_dtype, t->reduce_dtype, t->grad_dtype);
  init_model(model, t->dtype);
  fsdp_runtime_t runtime = NULL;
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, t->prefetch, t->limit, &runtime));
  fsdp_optimizer_t optimizer = NULL;
  const Rule rule = t->rule;
  if (rule.adam) {
    CHECK_OK(fsdp_optimizer_create_adamw(model, rule.lr, 0.9, 0.999, 1e-8, rule.weight_decay,
                                         &optimizer));
  } else {
    CHECK_OK(fsdp_optimizer_create_sgd(model, rule.lr, rule.momentum, 0.0, 0, rule.weight_decay,
                                       &optimizer));
  }
  for (int step = 0; step < t->steps; ++step) {
    StepOptions options = plain_step;
    options.zero_bits = rounded_bits(t->param_dtype);
    options.poison = step == t->poisoned_step && world_rank == world - 1;
    if (t->scaler != NULL) {
      CHECK_OK(fsdp_loss_scaler_scale(t->scaler, &options.loss_scale));
    }
    api_step_with(runtime, t->dtype, world_rank, step, &options);
    int found_inf = 0;
    if (t->scaler != NULL) {
      /* Only the last rank wrote the infinity; every rank must hear of it. */
      CHECK_OK(fsdp_loss_scaler_unscale_and_check(t->scaler, model, &found_inf));
      CHECK(found_inf == (step == t->poisoned_step), "%s: step %d: found_inf %d", t->label, step,
            found_inf);
      CHECK_OK(fsdp_loss_scaler_update(t->scaler, found_inf));
    }
    if (!found_inf) {
      CHECK_OK(fsdp_optimizer_step(optimizer));
    }
    CHECK_OK(fsdp_model_zero_grad(model));
  }
  Parameters expected;
  initial_parameters(&expected);
  reference_training(&expected, world, t->steps, rule, t->scaler != NULL ? t->poisoned_step : -1);
  {
    /* The comparison means something only if training moved the parameters. */
    Parameters initial;
    double moved = 0.0;
    initial_parameters(&initial);
    for (int i = 0; i < NPARAM; ++i) {
      for (int64_t e = 0; e < parameter_numel[i]; ++e) {
        moved = fmax(moved, fabs(parameter_of(&expected, i)[e] - parameter_of(&initial, i)[e]));
      }
    }
    CHECK(moved > 1e-3, "%s: training moved the parameters by only %g", t->label, moved);
  }
  compare(model, t->dtype, &expected, t->tolerance, t->label);
  if (t->grad_dtype == FSDP_BFLOAT16) {
    /* The kept gradients are 2 bytes per element: half the fp32 pieces' bytes under full_shard,
     * every element whole under shard_optimizer. */
    int64_t pieces = 0, gradients = 0, resident = 0, elements = 0;
    CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_PARAMETER_SHARDS, &pieces, NULL));
    CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_GRADIENT_SHARDS, &gradients, NULL));
    CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_RESIDENT_GRADIENTS, &resident, NULL));
    for (int i = 0; i < NPARAM; ++i) {
      elements += parameter_numel[i];
    }
    if (t->mode == FSDP_MODE_SHARD_OPTIMIZER) {
      CHECK(gradients == 0 && resident == 2 * elements, "%s: %lld B of whole gradients for %lld",
            t->label, (long long)resident, (long long)elements);
    } else {
      CHECK(2 * gradients == pieces && resident == 0, "%s: %lld B of gradients, %lld of pieces",
            t->label, (long long)gradients, (long long)pieces);
    }
  }
  /* Any order of destruction: the model's storage lives until the last handle goes. */
  fsdp_model_destroy(model);
  fsdp_optimizer_destroy(optimizer);
  fsdp_runtime_destroy(runtime);
}

static void train_in_mode_and_compare(int dtype, const char* strategy, int mode,
                                      int shard_group_size, Rule rule, int steps, int prefetch,
                                      int limit, double tolerance, const char* label) {
  const Training t = {
      dtype, strategy, mode, shard_group_size, FSDP_FLOAT32, FSDP_FLOAT32, rule, steps, prefetch,
      limit, NULL,     -1,   tolerance,        label,        FSDP_FLOAT32};
  train_and_check(&t);
}

static void train_and_compare(int dtype, const char* strategy, Rule rule, int steps, int prefetch,
                              int limit, double tolerance, const char* label) {
  train_in_mode_and_compare(dtype, strategy, FSDP_MODE_FULL_SHARD, -1, rule, steps, prefetch, limit,
                            tolerance, label);
}

/* ---- sharding modes and hybrid sharding: the same training, the same result ---- */
static void test_modes(void) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Rule adamw = {1, 0.01, 0.0, 0.05};
  const int modes[4] = {FSDP_MODE_FULL_SHARD, FSDP_MODE_SHARD_GRAD_OP, FSDP_MODE_SHARD_OPTIMIZER,
                        FSDP_MODE_NO_SHARD};
  const char* const names[4] = {"full_shard", "shard_grad_op", "shard_optimizer", "no_shard"};
  /* Hybrid: 2 shards per group on an even world, else groups of 1 (every rank a replica). */
  const int group = world % 2 == 0 ? 2 : 1;
  for (int m = 0; m < 4; ++m) {
    char label[96];
    snprintf(label, sizeof label, "fp64 %s AdamW", names[m]);
    train_in_mode_and_compare(FSDP_FLOAT64, "full", modes[m], -1, adamw, 3, 1, 2, 1e-12, label);
    snprintf(label, sizeof label, "fp64 %s AdamW, shard groups of %d", names[m], group);
    train_in_mode_and_compare(FSDP_FLOAT64, "layerwise", modes[m], group, adamw, 3, 1, 2, 1e-12,
                              label);
  }
  {
    /* The shard group's rank and size, and what is refused. */
    fsdp_model_t model = make_model_in_mode(FSDP_FLOAT64, "full", FSDP_MODE_FULL_SHARD, group);
    int rank = -1, size = -1;
    CHECK_OK(fsdp_model_rank(model, &rank, &size));
    CHECK(size == group && rank == world_rank % group, "shard group rank %d of %d", rank, size);
    CHECK_CODE(fsdp_model_set_mode(model, FSDP_MODE_NO_SHARD), FSDP_ERROR_STATE);
    fsdp_model_t replicated = make_model_in_mode(FSDP_FLOAT64, "full", FSDP_MODE_NO_SHARD, -1);
    int64_t first = -1, count = -1;
    CHECK_OK(fsdp_model_parameter_piece(replicated, "l0.w", &first, &count));
    CHECK(first == 0 && count == HIDDEN * IN, "no_shard holds [%lld, +%lld) of l0.w, not all",
          (long long)first, (long long)count);
    fsdp_model_destroy(replicated);
    CHECK_CODE(fsdp_model_set_shard_group_size(model, 1), FSDP_ERROR_STATE);
    fsdp_model_destroy(model);
  }
  fsdp_model_t model = NULL;
  CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &model));
  CHECK_CODE(fsdp_model_set_mode(model, 5), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "sharding mode 5 is not FSDP_MODE_FULL_SHARD (1)") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_model_set_mode(NULL, FSDP_MODE_NO_SHARD), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_model_set_shard_group_size(model, -2), FSDP_ERROR_INVALID_ARGUMENT);
  if (world > 1) {
    const int64_t shape[1] = {4};
    CHECK_OK(fsdp_model_add_parameter(model, "p", 1, shape, "l", 0));
    CHECK_OK(fsdp_model_set_shard_group_size(model, world + 1));
    CHECK_CODE(fsdp_model_shard(model, MPI_Comm_c2f(MPI_COMM_WORLD), "full"),
               FSDP_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(fsdp_last_error(), "does not divide") != NULL, "message: %s", fsdp_last_error());
  }
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: modes: ok\n");
  }
}

/* ---- initialization by callback, and plain SGD's exact rule ---- */
static int fill_with_index(int64_t first, void* values, int64_t count, void* user_data) {
  const double scale = *(const double*)user_data;
  for (int64_t i = 0; i < count; ++i) {
    ((double*)values)[i] = scale * (double)(first + i);
  }
  return 0;
}

static int failing_fill(int64_t first, void* values, int64_t count, void* user_data) {
  (void)first;
  (void)values;
  (void)count;
  (void)user_data;
  return 42;
}

/* A step whose every gradient element is `gradient` on this rank. In the backward scopes every
 * element of every parameter must be full_value (unless NaN). */
/* trainable: per parameter, 0 for a frozen one, whose fsdp_grad must fail with FSDP_ERROR_STATE
 * (NULL: every parameter trains). */
static void constant_gradient_step_of(fsdp_runtime_t runtime, int dtype, double gradient,
                                      double full_value, const int* trainable) {
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  const char* backward_order[2] = {"l1", "l0"};
  for (int u = 0; u < 2; ++u) {
    CHECK_OK(fsdp_begin_backward(runtime, backward_order[u]));
    for (int i = 0; i < NPARAM; ++i) {
      if (strncmp(parameter_names[i], backward_order[u], 2) != 0) {
        continue;
      }
      void *grad = NULL, *full = NULL;
      int64_t numel = 0;
      if (trainable != NULL && !trainable[i]) {
        CHECK_CODE(fsdp_grad(runtime, parameter_names[i], &grad, &numel), FSDP_ERROR_STATE);
        CHECK(strstr(fsdp_last_error(), "frozen") != NULL, "message: %s", fsdp_last_error());
        continue;
      }
      CHECK_OK(fsdp_grad(runtime, parameter_names[i], &grad, &numel));
      CHECK_OK(fsdp_full(runtime, parameter_names[i], &full, &numel));
      for (int64_t e = 0; e < numel; ++e) {
        add(grad, dtype, e, gradient);
        CHECK(isnan(full_value) || get(full, dtype, e) == full_value,
              "%s[%lld] = %.17g in the backward scope, expected %.17g", parameter_names[i],
              (long long)e, get(full, dtype, e), full_value);
      }
    }
    CHECK_OK(fsdp_end_backward(runtime, backward_order[u]));
  }
  CHECK_OK(fsdp_finish_step(runtime));
}

static void constant_gradient_step(fsdp_runtime_t runtime, int dtype, double gradient,
                                   double full_value) {
  constant_gradient_step_of(runtime, dtype, gradient, full_value, NULL);
}

static void test_init_with_and_sgd_rule(void) {
  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  double scale = 0.5;
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(fsdp_model_init_with(model, parameter_names[i], fill_with_index, &scale));
  }
  double whole[HIDDEN * IN];
  CHECK_OK(fsdp_model_copy_parameter(model, "l0.w", whole));
  for (int e = 0; e < HIDDEN * IN; ++e) {
    CHECK(whole[e] == 0.5 * e, "l0.w[%d] = %g after init_with, expected %g", e, whole[e], 0.5 * e);
  }
  int64_t first = -1, count = -1, total = 0;
  CHECK_OK(fsdp_model_parameter_piece(model, "l0.w", &first, &count));
  CHECK(count >= 0 && first >= 0 && first + count <= HIDDEN * IN, "piece %lld + %lld",
        (long long)first, (long long)count);
  MPI_Allreduce(&count, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(total == HIDDEN * IN, "the pieces of l0.w add up to %lld elements", (long long)total);

  /* Every rank adds rank + 1 to each gradient element: the average is (N + 1) / 2, and plain SGD
   * moves p to p - lr (N + 1) / 2 exactly (all values are exact in binary). */
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_runtime_t runtime = NULL;
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, &runtime));
  /* Settings an optimizer refuses, and the codes of every kind of failure, by name. */
  fsdp_optimizer_t refused = NULL;
  CHECK_CODE(fsdp_optimizer_create_sgd(model, -0.1, 0.0, 0.0, 0, 0.0, &refused),
             FSDP_ERROR_LIBRARY);
  CHECK(refused == NULL && strstr(fsdp_last_error(), "lr must be >= 0") != NULL, "message: %s",
        fsdp_last_error());
  /* The library's version, as the project declares it (tests/CMakeLists.txt passes it). */
  CHECK(strcmp(fsdp_version(), FSDP_EXPECTED_VERSION) == 0, "fsdp_version() is '%s', expected '%s'",
        fsdp_version(), FSDP_EXPECTED_VERSION);
  CHECK(strcmp(fsdp_error_name(FSDP_ERROR_MISMATCH), "FSDP_ERROR_MISMATCH") == 0 &&
            strcmp(fsdp_error_name(FSDP_ERROR_TIMEOUT), "FSDP_ERROR_TIMEOUT") == 0 &&
            strcmp(fsdp_error_name(FSDP_ERROR_COMMUNICATION), "FSDP_ERROR_COMMUNICATION") == 0 &&
            strcmp(fsdp_error_name(FSDP_ERROR_IO), "FSDP_ERROR_IO") == 0 &&
            strcmp(fsdp_error_name(13), "unknown fsdp error code") == 0,
        "error names");
  fsdp_optimizer_t sgd = NULL;
  CHECK_OK(fsdp_optimizer_create_sgd(model, 0.25, 0.0, 0.0, 0, 0.0, &sgd));
  CHECK_CODE(fsdp_optimizer_step(sgd), FSDP_ERROR_LIBRARY); /* no gradients yet */
  CHECK(strstr(fsdp_last_error(), "fsdp_optimizer_step") != NULL, "message: %s", fsdp_last_error());
  constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
  CHECK_OK(fsdp_optimizer_step(sgd));
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(fsdp_model_copy_parameter(model, parameter_names[i], whole));
    for (int64_t e = 0; e < parameter_numel[i]; ++e) {
      const double want = 0.5 * (double)e - 0.25 * (world + 1) / 2.0;
      CHECK(whole[e] == want, "%s[%lld] = %.17g after one SGD step, expected %.17g",
            parameter_names[i], (long long)e, whole[e], want);
    }
  }
  CHECK_CODE(fsdp_model_init_with(model, "l0.w", failing_fill, NULL), FSDP_ERROR_CALLBACK);
  CHECK(strstr(fsdp_last_error(), "returned 42") != NULL, "message: %s", fsdp_last_error());
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: init_with and SGD's exact rule: ok\n");
  }
}

/* A fully sharded fp64 model whose every element starts at 0.5 * index, its runtime, and plain
 * SGD at lr. */
static fsdp_model_t index_model_with_sgd(double lr, fsdp_runtime_t* runtime,
                                         fsdp_optimizer_t* sgd) {
  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  double scale = 0.5;
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(fsdp_model_init_with(model, parameter_names[i], fill_with_index, &scale));
  }
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, runtime));
  CHECK_OK(fsdp_optimizer_create_sgd(model, lr, 0.0, 0.0, 0, 0.0, sgd));
  return model;
}

/* A schedule sets each step's rate from the optimizer's step count: step decay of 0.5 by half
 * every 2 steps after 2 warm-up steps takes 0.25, 0.5, 0.5, 0.5, 0.25, 0.25 (exact in binary), so
 * six plain SGD steps on the average gradient (N + 1) / 2 move every element by exactly their sum
 * times it. Ranks that set different rates fail together at the next step. */
static void test_lr_schedule(void) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_runtime_t runtime = NULL;
  fsdp_optimizer_t sgd = NULL;
  fsdp_model_t model = index_model_with_sgd(99.0, &runtime, &sgd);
  fsdp_lr_schedule_t schedule = NULL;
  CHECK_OK(fsdp_lr_schedule_create("step", 0.5, 2, 0, 0.0, 2, 0.5, &schedule));
  const double rates[6] = {0.25, 0.5, 0.5, 0.5, 0.25, 0.25};
  double moved = 0;
  for (int step = 0; step < 6; ++step) {
    double at = -1, lr = -1;
    int64_t steps = -1;
    CHECK_OK(fsdp_lr_schedule_lr_at(schedule, step, &at));
    CHECK_OK(fsdp_lr_schedule_apply(schedule, sgd));
    CHECK_OK(fsdp_optimizer_get_state(sgd, &lr, &steps));
    CHECK(at == rates[step] && lr == rates[step] && steps == step,
          "step %d: lr_at %g, the optimizer's lr %g after apply, step count %lld", step, at, lr,
          (long long)steps);
    constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
    CHECK_OK(fsdp_optimizer_step(sgd));
    CHECK_OK(fsdp_model_zero_grad(model));
    moved += rates[step] * (world + 1) / 2.0;
  }
  double whole[HIDDEN * IN];
  CHECK_OK(fsdp_model_copy_parameter(model, "l0.w", whole));
  for (int e = 0; e < HIDDEN * IN; ++e) {
    CHECK(whole[e] == 0.5 * e - moved, "l0.w[%d] = %.17g after the schedule, expected %.17g", e,
          whole[e], 0.5 * e - moved);
  }

  /* What a schedule and the setters refuse, naming the setting; nothing changes. */
  fsdp_lr_schedule_t refused = NULL;
  CHECK_CODE(fsdp_lr_schedule_create("cosine", 0.1, 0, 10, 0.5, 1, 0.1, &refused),
             FSDP_ERROR_LIBRARY);
  CHECK(refused == NULL && strstr(fsdp_last_error(), "min_lr must lie in [0, lr]") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_lr_schedule_create("exponential", 0.1, 0, 0, 0, 1, 0.1, &refused),
             FSDP_ERROR_LIBRARY);
  CHECK(strstr(fsdp_last_error(), "expected constant, linear, cosine or step") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_lr_schedule_create(NULL, 0.1, 0, 0, 0, 1, 0.1, &refused),
             FSDP_ERROR_INVALID_ARGUMENT);
  double at = 0;
  CHECK_CODE(fsdp_lr_schedule_lr_at(schedule, -1, &at), FSDP_ERROR_LIBRARY);
  CHECK_CODE(fsdp_optimizer_set_lr(sgd, -1.0), FSDP_ERROR_LIBRARY);
  CHECK(strstr(fsdp_last_error(), "lr must be >= 0") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_optimizer_set_weight_decay(sgd, -1.0), FSDP_ERROR_LIBRARY);
  double lr = 0;
  CHECK_OK(fsdp_optimizer_get_state(sgd, &lr, NULL));
  CHECK(lr == 0.25, "a refused rate changed the rate to %g", lr);

  if (world > 1) {
    CHECK_OK(fsdp_optimizer_set_lr(sgd, world_rank == 1 ? 0.5 : 0.25));
    constant_gradient_step(runtime, FSDP_FLOAT64, 1.0, NAN);
    CHECK_CODE(fsdp_optimizer_step(sgd), FSDP_ERROR_MISMATCH);
    CHECK(strstr(fsdp_last_error(), "lr") != NULL, "message: %s", fsdp_last_error());
  }
  fsdp_lr_schedule_destroy(schedule);
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: learning-rate schedules: ok\n");
  }
}

/* Gradient accumulation: two steps without gradient sync and one with it, every rank adding rank +
 * 1 each time, reduce 3 (N + 1) / 2 once, and one SGD step at lr 0.25 moves every element by
 * exactly that times 0.25. The setting is refused inside a step, and between ranks that disagree.
 */
static void test_gradient_accumulation(void) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_runtime_t runtime = NULL;
  fsdp_optimizer_t sgd = NULL;
  fsdp_model_t model = index_model_with_sgd(0.25, &runtime, &sgd);
  CHECK_OK(fsdp_runtime_set_requires_gradient_sync(runtime, 0));
  constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
  constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
  CHECK_CODE(fsdp_optimizer_step(sgd), FSDP_ERROR_LIBRARY); /* nothing reduced yet */
  CHECK_OK(fsdp_runtime_set_requires_gradient_sync(runtime, 1));
  constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
  CHECK_OK(fsdp_optimizer_step(sgd));
  double whole[HIDDEN * IN];
  CHECK_OK(fsdp_model_copy_parameter(model, "l0.w", whole));
  for (int e = 0; e < HIDDEN * IN; ++e) {
    const double want = 0.5 * e - 0.25 * 3 * (world + 1) / 2.0;
    CHECK(whole[e] == want, "l0.w[%d] = %.17g after 3 accumulated steps, expected %.17g", e,
          whole[e], want);
  }
  CHECK_OK(fsdp_model_zero_grad(model));

  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK_CODE(fsdp_runtime_set_requires_gradient_sync(runtime, 0), FSDP_ERROR_ORDER);
  CHECK(strstr(fsdp_last_error(), "between steps") != NULL, "message: %s", fsdp_last_error());
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  CHECK_OK(fsdp_finish_step(runtime));
  if (world > 1) {
    CHECK_CODE(fsdp_runtime_set_requires_gradient_sync(runtime, world_rank == 1),
               FSDP_ERROR_MISMATCH);
  }
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: gradient accumulation: ok\n");
  }
}

/* Overlap limits from the next step on: with every reduction waited for (0) and then with 3 in
 * flight, one SGD step at lr 0.25 of gradients rank + 1 moves every element by exactly 0.25 (N + 1)
 * / 2. A negative limit, a call inside a step and ranks that disagree are refused. */
static void test_overlap(void) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_runtime_t runtime = NULL;
  fsdp_optimizer_t sgd = NULL;
  fsdp_model_t model = index_model_with_sgd(0.25, &runtime, &sgd);
  const int limits[2][2] = {{0, 0}, {1, 3}};
  for (int k = 0; k < 2; ++k) {
    CHECK_OK(fsdp_runtime_set_overlap(runtime, limits[k][0], limits[k][1]));
    constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
    CHECK_OK(fsdp_optimizer_step(sgd));
    CHECK_OK(fsdp_model_zero_grad(model));
  }
  double whole[HIDDEN * IN];
  CHECK_OK(fsdp_model_copy_parameter(model, "l0.w", whole));
  for (int e = 0; e < HIDDEN * IN; ++e) {
    const double want = 0.5 * e - 2 * 0.25 * (world + 1) / 2.0;
    CHECK(whole[e] == want, "l0.w[%d] = %.17g after 2 steps, expected %.17g", e, whole[e], want);
  }
  CHECK_CODE(fsdp_runtime_set_overlap(runtime, 0, -1), FSDP_ERROR_LIBRARY);
  CHECK(strstr(fsdp_last_error(), "max_reductions_in_flight") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK_CODE(fsdp_runtime_set_overlap(runtime, 0, 1), FSDP_ERROR_ORDER);
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  CHECK_OK(fsdp_finish_step(runtime));
  if (world > 1) {
    CHECK_CODE(fsdp_runtime_set_overlap(runtime, 0, world_rank == 1 ? 1 : 2), FSDP_ERROR_MISMATCH);
  }
  CHECK_CODE(fsdp_runtime_set_overlap(NULL, 0, 1), FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: overlap limits: ok\n");
  }
}

/* The optimizer in backward: the runtime steps SGD (lr 0.25) on each unit as its reduction lands,
 * and fsdp_finish_step returns with the step taken: every element moves by exactly 0.25 (N + 1) / 2
 * per step without fsdp_optimizer_step, also after the optimizer's handle is destroyed (the
 * runtime keeps it), and not once it is turned off. Another model's optimizer, a call inside a
 * step and ranks that disagree are refused. */
static void test_optimizer_in_backward(void) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_runtime_t runtime = NULL;
  fsdp_optimizer_t sgd = NULL;
  fsdp_model_t model = index_model_with_sgd(0.25, &runtime, &sgd);
  CHECK_OK(fsdp_runtime_set_optimizer_in_backward(runtime, sgd));
  for (int step = 0; step < 3; ++step) {
    if (step == 2) {
      fsdp_optimizer_destroy(sgd);
    }
    constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
    CHECK_OK(fsdp_model_zero_grad(model));
  }
  CHECK_OK(fsdp_runtime_set_optimizer_in_backward(runtime, NULL));
  constant_gradient_step(runtime, FSDP_FLOAT64, world_rank + 1, NAN);
  CHECK_OK(fsdp_model_zero_grad(model));
  double whole[HIDDEN * IN];
  CHECK_OK(fsdp_model_copy_parameter(model, "l0.w", whole));
  for (int e = 0; e < HIDDEN * IN; ++e) {
    const double want = 0.5 * e - 3 * 0.25 * (world + 1) / 2.0;
    CHECK(whole[e] == want, "l0.w[%d] = %.17g after 3 steps, expected %.17g", e, whole[e], want);
  }
  fsdp_runtime_t other_runtime = NULL;
  fsdp_optimizer_t other = NULL;
  fsdp_model_t other_model = index_model_with_sgd(0.25, &other_runtime, &other);
  CHECK_CODE(fsdp_runtime_set_optimizer_in_backward(runtime, other), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "another model") != NULL, "message: %s", fsdp_last_error());
  CHECK_OK(fsdp_begin_forward(other_runtime, "l0"));
  CHECK_CODE(fsdp_runtime_set_optimizer_in_backward(other_runtime, other), FSDP_ERROR_ORDER);
  CHECK_OK(fsdp_end_forward(other_runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(other_runtime, "l1"));
  CHECK_OK(fsdp_end_forward(other_runtime, "l1"));
  CHECK_OK(fsdp_finish_step(other_runtime));
  if (world > 1) {
    CHECK_CODE(
        fsdp_runtime_set_optimizer_in_backward(other_runtime, world_rank == 1 ? NULL : other),
        FSDP_ERROR_MISMATCH);
  }
  fsdp_optimizer_destroy(other);
  fsdp_runtime_destroy(other_runtime);
  fsdp_model_destroy(other_model);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: optimizer in backward: ok\n");
  }
}

/* Frozen parameters (fsdp_model_set_trainable 0): l0.w and l1.b keep their values exactly through
 * a plain SGD step in every mode while the others move by lr times the average gradient
 * (N + 1) / 2; fsdp_grad of a frozen one fails with FSDP_ERROR_STATE. */
static void test_frozen_parameters(void) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int modes[4] = {FSDP_MODE_FULL_SHARD, FSDP_MODE_SHARD_GRAD_OP, FSDP_MODE_SHARD_OPTIMIZER,
                        FSDP_MODE_NO_SHARD};
  const int64_t shapes[NPARAM][2] = {{HIDDEN, IN}, {HIDDEN, 0}, {OUT, HIDDEN}, {OUT, 0}};
  const int ndims[NPARAM] = {2, 1, 2, 1};
  const char* const layers[NPARAM] = {"l0", "l0", "l1", "l1"};
  const int trainable[NPARAM] = {0, 1, 1, 0};
  for (int m = 0; m < 4; ++m) {
    fsdp_model_t model = NULL;
    CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &model));
    CHECK_OK(fsdp_model_set_mode(model, modes[m]));
    for (int i = 0; i < NPARAM; ++i) {
      CHECK_OK(
          fsdp_model_add_parameter(model, parameter_names[i], ndims[i], shapes[i], layers[i], 0));
      CHECK_OK(fsdp_model_set_trainable(model, parameter_names[i], trainable[i]));
    }
    CHECK_CODE(fsdp_model_set_trainable(model, "l9.w", 0), FSDP_ERROR_UNKNOWN_NAME);
    CHECK_CODE(fsdp_model_set_trainable(model, "l0.w", 2), FSDP_ERROR_INVALID_ARGUMENT);
    CHECK_OK(fsdp_model_shard(model, MPI_Comm_c2f(MPI_COMM_WORLD), "full"));
    CHECK_CODE(fsdp_model_set_trainable(model, "l0.w", 1), FSDP_ERROR_STATE);
    double scale = 0.5;
    for (int i = 0; i < NPARAM; ++i) {
      CHECK_OK(fsdp_model_init_with(model, parameter_names[i], fill_with_index, &scale));
    }
    fsdp_runtime_t runtime = NULL;
    fsdp_optimizer_t sgd = NULL;
    CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, &runtime));
    CHECK_OK(fsdp_optimizer_create_sgd(model, 0.25, 0.0, 0.0, 0, 0.0, &sgd));
    constant_gradient_step_of(runtime, FSDP_FLOAT64, world_rank + 1, NAN, trainable);
    CHECK_OK(fsdp_optimizer_step(sgd));
    for (int i = 0; i < NPARAM; ++i) {
      double whole[HIDDEN * IN];
      CHECK_OK(fsdp_model_copy_parameter(model, parameter_names[i], whole));
      for (int64_t e = 0; e < parameter_numel[i]; ++e) {
        const double want = 0.5 * (double)e - (trainable[i] ? 0.25 * (world + 1) / 2.0 : 0.0);
        CHECK(whole[e] == want, "mode %d: %s[%lld] = %.17g after a step, expected %.17g", modes[m],
              parameter_names[i], (long long)e, whole[e], want);
      }
    }
    fsdp_optimizer_destroy(sgd);
    fsdp_runtime_destroy(runtime);
    fsdp_model_destroy(model);
  }
  if (world_rank == 0) {
    printf("test_c_api: frozen parameters: ok\n");
  }
}

/* ---- mixed precision: 16-bit gathers and reductions of an fp32 model ---- */

/* What each dtype of the policy does, exactly: every parameter element starts at 1 + 2^-12 and
 * every rank's gradient element is 1 + 2^-12, neither a bf16 nor an fp16 value (both round them
 * to 1). fsdp_full gives 1 when the parameters are gathered in 16 bits, else 1 + 2^-12; one plain
 * SGD step at lr 1 leaves 2^-12 when the gradients are reduced in 16 bits (they average to 1),
 * else 0. */
static void exact_mixed_step(int param_dtype, int reduce_dtype) {
  const double odd = 1.0 + 0x1p-12;
  const double full_value = param_dtype == FSDP_FLOAT32 ? odd : 1.0;
  const double after = reduce_dtype == FSDP_FLOAT32 ? 0.0 : 0x1p-12;
  fsdp_model_t model = make_mixed_model(FSDP_FLOAT32, "full", FSDP_MODE_FULL_SHARD, -1, param_dtype,
                                        reduce_dtype, FSDP_FLOAT32);
  float values[HIDDEN * IN];
  for (int e = 0; e < HIDDEN * IN; ++e) {
    values[e] = (float)odd;
  }
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(fsdp_model_init_from_full(model, parameter_names[i], values));
  }
  fsdp_runtime_t runtime = NULL;
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, &runtime));
  fsdp_optimizer_t sgd = NULL;
  CHECK_OK(fsdp_optimizer_create_sgd(model, 1.0, 0.0, 0.0, 0, 0.0, &sgd));
  constant_gradient_step(runtime, FSDP_FLOAT32, odd, full_value);
  CHECK_OK(fsdp_optimizer_step(sgd));
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(fsdp_model_copy_parameter(model, parameter_names[i], values));
    for (int64_t e = 0; e < parameter_numel[i]; ++e) {
      CHECK(values[e] == after, "policy (%d, %d): %s[%lld] = %.9g after one step, expected %.9g",
            param_dtype, reduce_dtype, parameter_names[i], (long long)e, values[e], after);
    }
  }
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
}

/* Tolerances of 16-bit training against fp64 training by hand (as compare measures: relative,
 * absolute below 1). Measured at 1-3 ranks: bf16 at most 9.0e-5; fp16 at most 1.7e-5 (AdamW) and
 * 7.9e-5 (SGD with loss scaling). */
#define BF16_TOLERANCE 1e-3
#define FP16_TOLERANCE 3e-4

/* 3 AdamW steps of an fp32 model under the policy, compared with fp64 training. */
static void train_mixed(int param_dtype, int reduce_dtype, int mode, double tolerance,
                        const char* label) {
  const Rule adamw = {1, 0.01, 0.0, 0.05};
  const Training t = {FSDP_FLOAT32, "full", mode,      -1,    param_dtype,
                      reduce_dtype, adamw,  3,         1,     2,
                      NULL,         -1,     tolerance, label, FSDP_FLOAT32};
  train_and_check(&t);
}

/* The same with the gradients kept in bfloat16 (fsdp_model_set_grad_dtype). */
static void train_with_bf16_gradients(int mode, const char* label) {
  const Rule adamw = {1, 0.01, 0.0, 0.05};
  const Training t = {
      FSDP_FLOAT32, "full", mode,           -1,    FSDP_BFLOAT16, FSDP_BFLOAT16, adamw, 3, 1, 2,
      NULL,         -1,     BF16_TOLERANCE, label, FSDP_BFLOAT16};
  train_and_check(&t);
}

static void test_mixed_precision(void) {
  train_mixed(FSDP_BFLOAT16, FSDP_BFLOAT16, FSDP_MODE_FULL_SHARD, BF16_TOLERANCE,
              "bf16 full_shard AdamW");
  train_mixed(FSDP_BFLOAT16, FSDP_BFLOAT16, FSDP_MODE_NO_SHARD, BF16_TOLERANCE,
              "bf16 no_shard AdamW");
  train_mixed(FSDP_BFLOAT16, FSDP_BFLOAT16, FSDP_MODE_SHARD_GRAD_OP, BF16_TOLERANCE,
              "bf16 shard_grad_op AdamW");
  train_mixed(FSDP_FLOAT16, FSDP_FLOAT16, FSDP_MODE_FULL_SHARD, FP16_TOLERANCE,
              "fp16 full_shard AdamW");
  train_mixed(FSDP_FLOAT16, FSDP_FLOAT16, FSDP_MODE_NO_SHARD, FP16_TOLERANCE,
              "fp16 no_shard AdamW");
  train_with_bf16_gradients(FSDP_MODE_FULL_SHARD, "bf16, bf16 gradients, full_shard AdamW");
  train_with_bf16_gradients(FSDP_MODE_SHARD_OPTIMIZER,
                            "bf16, bf16 gradients, shard_optimizer AdamW");
  exact_mixed_step(FSDP_FLOAT32, FSDP_FLOAT32);
  exact_mixed_step(FSDP_BFLOAT16, FSDP_FLOAT32);
  exact_mixed_step(FSDP_FLOAT32, FSDP_BFLOAT16);
  exact_mixed_step(FSDP_FLOAT16, FSDP_FLOAT16);

  /* Refused, with what would be right; a refused call changes nothing. */
  fsdp_model_t model = NULL;
  CHECK_CODE(fsdp_model_create(FSDP_BFLOAT16, &model), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "fsdp_model_set_mixed_precision") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &model));
  CHECK_CODE(fsdp_model_set_mixed_precision(model, FSDP_BFLOAT16, FSDP_FLOAT32),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "param_dtype FSDP_BFLOAT16 for an FSDP_FLOAT64 model") != NULL &&
            strstr(fsdp_last_error(), "create the model with FSDP_FLOAT32") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_model_set_mixed_precision(model, FSDP_FLOAT32, FSDP_FLOAT16),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_OK(fsdp_model_set_mixed_precision(model, FSDP_FLOAT64, FSDP_FLOAT32)); /* no cast */
  fsdp_model_destroy(model);
  CHECK_OK(fsdp_model_create(FSDP_FLOAT32, &model));
  CHECK_CODE(fsdp_model_set_mixed_precision(model, FSDP_FLOAT64, FSDP_BFLOAT16),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "param_dtype FSDP_FLOAT64 for an FSDP_FLOAT32 model") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_model_set_mixed_precision(model, FSDP_BFLOAT16, 9), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "reduce_dtype 9 is not FSDP_FLOAT32 (1: no cast)") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_model_set_mixed_precision(NULL, FSDP_BFLOAT16, FSDP_BFLOAT16),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_model_set_grad_dtype(model, FSDP_FLOAT16), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(
      strstr(fsdp_last_error(), "grad_dtype FSDP_FLOAT16: unscaling loss-scaled gradients") != NULL,
      "message: %s", fsdp_last_error());
  fsdp_model_destroy(model);
  CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &model));
  CHECK_CODE(fsdp_model_set_grad_dtype(model, FSDP_BFLOAT16), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "grad_dtype FSDP_BFLOAT16 for an FSDP_FLOAT64 model") != NULL,
        "message: %s", fsdp_last_error());
  fsdp_model_destroy(model);
  model = make_model(FSDP_FLOAT32, "full");
  CHECK_CODE(fsdp_model_set_mixed_precision(model, FSDP_BFLOAT16, FSDP_BFLOAT16), FSDP_ERROR_STATE);
  CHECK(strstr(fsdp_last_error(),
               "the mixed-precision policy is set before fsdp_model_shard; the model is already "
               "sharded") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_model_set_grad_dtype(model, FSDP_BFLOAT16), FSDP_ERROR_STATE);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: mixed precision: ok\n");
  }
}

/* ---- dynamic loss scaling ---- */

/* 4 steps of SGD with momentum under a new loss scaler (scale 1024, x2 after 2 clean steps, /2 on
 * an overflow) with an infinity written at poisoned_step; returns the scaler. */
static fsdp_loss_scaler_t train_with_scaler(int dtype, int mode, int half, int poisoned_step,
                                            double tolerance, const char* label) {
  const Rule sgd = {0, 0.1, 0.9, 0.01};
  fsdp_loss_scaler_t scaler = NULL;
  CHECK_OK(fsdp_loss_scaler_create(1024.0, 2.0, 0.5, 2, &scaler));
  const Training t = {dtype, "full", mode,          -1,        half,  half,        sgd, 4, 1,
                      2,     scaler, poisoned_step, tolerance, label, FSDP_FLOAT32};
  train_and_check(&t);
  return scaler;
}

static void test_loss_scaler(void) {
  fsdp_loss_scaler_t scaler = NULL;
  double scale = 0.0;
  int64_t clean = -1, skipped = -1;
  /* 0: PyTorch's defaults, 65536 growing 2x after 2000 clean steps, halving on an overflow. */
  CHECK_OK(fsdp_loss_scaler_create(0.0, 0.0, 0.0, 0, &scaler));
  CHECK_OK(fsdp_loss_scaler_scale(scaler, &scale));
  CHECK(scale == 65536.0, "default scale %g", scale);
  for (int step = 0; step < 1999; ++step) {
    CHECK_OK(fsdp_loss_scaler_update(scaler, 0));
  }
  CHECK_OK(fsdp_loss_scaler_get_state(scaler, &scale, &clean, NULL));
  CHECK(scale == 65536.0 && clean == 1999, "after 1999 clean steps: scale %g, clean %lld", scale,
        (long long)clean);
  CHECK_OK(fsdp_loss_scaler_update(scaler, 0));
  CHECK_OK(fsdp_loss_scaler_scale(scaler, &scale));
  CHECK(scale == 131072.0, "after 2000 clean steps the scale is %g", scale);
  CHECK_OK(fsdp_loss_scaler_update(scaler, 1));
  CHECK_OK(fsdp_loss_scaler_scale(scaler, &scale));
  CHECK(scale == 65536.0, "after an overflow the scale is %g", scale);
  fsdp_loss_scaler_destroy(scaler);

  /* Settings refused, named. */
  const struct {
    double init_scale, growth_factor, backoff_factor;
    int64_t growth_interval;
    const char* named;
  } refused[] = {{-1.0, 0.0, 0.0, 0, "init_scale"},
                 {INFINITY, 0.0, 0.0, 0, "init_scale"},
                 {0.0, 0.5, 0.0, 0, "growth_factor"},
                 {0.0, 0.0, 1.5, 0, "backoff_factor"},
                 {0.0, 0.0, 0.0, -3, "growth_interval"}};
  for (size_t r = 0; r < sizeof refused / sizeof refused[0]; ++r) {
    scaler = (fsdp_loss_scaler_t)&scale; /* overwritten with NULL on failure */
    CHECK_CODE(
        fsdp_loss_scaler_create(refused[r].init_scale, refused[r].growth_factor,
                                refused[r].backoff_factor, refused[r].growth_interval, &scaler),
        FSDP_ERROR_LIBRARY);
    CHECK(scaler == NULL && strstr(fsdp_last_error(), refused[r].named) != NULL, "message: %s",
          fsdp_last_error());
  }
  CHECK_CODE(fsdp_loss_scaler_create(0.0, 0.0, 0.0, 0, NULL), FSDP_ERROR_INVALID_ARGUMENT);

  /* fp16 training from scale 1024, growing after 2 clean steps; the last rank writes an infinity
   * into its gradient at step 1: every rank finds it (train_and_check checks found_inf on every
   * rank) and skips that step, and the result is fp64 training without step 1's batches. */
  scaler = train_with_scaler(FSDP_FLOAT32, FSDP_MODE_FULL_SHARD, FSDP_FLOAT16, 1, FP16_TOLERANCE,
                             "fp16 full_shard SGD, loss scale 1024, overflow at step 1");
  /* 1024 -> step 0 clean -> overflow: 512 -> 2 clean steps: 1024. */
  CHECK_OK(fsdp_loss_scaler_get_state(scaler, &scale, &clean, &skipped));
  CHECK(scale == 1024.0 && clean == 0 && skipped == 1, "state %g, %lld, %lld", scale,
        (long long)clean, (long long)skipped);
  CHECK_OK(fsdp_loss_scaler_update(scaler, 1));
  CHECK_OK(fsdp_loss_scaler_get_state(scaler, &scale, &clean, &skipped));
  CHECK(scale == 512.0 && clean == 0 && skipped == 2, "an overflow halves: state %g, %lld, %lld",
        scale, (long long)clean, (long long)skipped);
  fsdp_loss_scaler_destroy(scaler);

  /* fp64 no_shard: scaling by a power of 2 is exact, so the result is fp64 training's. */
  scaler = train_with_scaler(FSDP_FLOAT64, FSDP_MODE_NO_SHARD, FSDP_FLOAT32, 2, 1e-12,
                             "fp64 no_shard SGD, loss scale 1024, overflow at step 2");

  /* State for checkpoints: set and get; a bad state is refused and changes nothing. */
  CHECK_OK(fsdp_loss_scaler_set_state(scaler, 4096.0, 7, 3));
  CHECK_CODE(fsdp_loss_scaler_set_state(scaler, -1.0, 0, 0), FSDP_ERROR_LIBRARY);
  CHECK(strstr(fsdp_last_error(), "positive finite scale") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_CODE(fsdp_loss_scaler_set_state(scaler, 1.0, -1, 0), FSDP_ERROR_LIBRARY);
  CHECK_OK(fsdp_loss_scaler_get_state(scaler, &scale, &clean, &skipped));
  CHECK(scale == 4096.0 && clean == 7 && skipped == 3, "state %g, %lld, %lld", scale,
        (long long)clean, (long long)skipped);
  CHECK_OK(fsdp_loss_scaler_get_state(scaler, NULL, NULL, NULL));

  /* NULL handles and pointers, a model not sharded yet, handles alive at fsdp_finalize. */
  int found_inf = -1;
  fsdp_model_t unsharded = NULL;
  CHECK_OK(fsdp_model_create(FSDP_FLOAT32, &unsharded));
  CHECK_CODE(fsdp_loss_scaler_unscale_and_check(scaler, unsharded, &found_inf), FSDP_ERROR_STATE);
  CHECK_CODE(fsdp_loss_scaler_unscale_and_check(scaler, NULL, &found_inf),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "the model handle is NULL") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_CODE(fsdp_loss_scaler_unscale_and_check(scaler, unsharded, NULL),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_loss_scaler_scale(NULL, &scale), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "the loss scaler handle is NULL") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_CODE(fsdp_loss_scaler_scale(scaler, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_loss_scaler_update(NULL, 0), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_loss_scaler_get_state(NULL, &scale, NULL, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_loss_scaler_set_state(NULL, 1.0, 0, 0), FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_model_destroy(unsharded);
  CHECK_CODE(fsdp_finalize(), FSDP_ERROR_STATE); /* the scaler is alive */
  CHECK(strstr(fsdp_last_error(), "loss scaler") != NULL, "message: %s", fsdp_last_error());
  fsdp_loss_scaler_destroy(scaler);
  fsdp_loss_scaler_destroy(NULL);
  if (world_rank == 0) {
    printf("test_c_api: loss scaler: ok\n");
  }
}

/* ---- misuse: codes and messages, never a crash, and the runtime still usable after ---- */
static void test_errors(void) {
  fsdp_model_t model = NULL;
  CHECK_CODE(fsdp_model_create(7, &model), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(model == NULL, "no model on failure");
  CHECK(strstr(fsdp_last_error(), "dtype 7") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_model_add_parameter(NULL, "x", 0, NULL, NULL, 0), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_begin_forward(NULL, "l0"), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_finish_step(NULL), FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_model_destroy(NULL);
  fsdp_runtime_destroy(NULL);
  fsdp_optimizer_destroy(NULL);

  CHECK_OK(fsdp_model_create(FSDP_FLOAT32, &model));
  const int64_t bad_shape[2] = {3, 0};
  CHECK_CODE(fsdp_model_add_parameter(model, "w", 2, bad_shape, "l", 0),
             FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_optimizer_t optimizer = NULL;
  CHECK_CODE(fsdp_optimizer_create_adam(model, 1e-3, 0.9, 0.999, 1e-8, 0.0, &optimizer),
             FSDP_ERROR_STATE); /* not sharded yet */
  CHECK_CODE(fsdp_model_shard(model, MPI_Comm_c2f(MPI_COMM_WORLD), "diagonal"),
             FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_model_destroy(model);

  model = make_model(FSDP_FLOAT32, "full");
  const int64_t shape[1] = {4};
  CHECK_CODE(fsdp_model_add_parameter(model, "late", 1, shape, NULL, 0), FSDP_ERROR_STATE);
  CHECK_CODE(fsdp_model_init_from_full(model, "l9.w", shape), FSDP_ERROR_UNKNOWN_NAME);
  CHECK(strstr(fsdp_last_error(), "'l9.w'") != NULL, "message: %s", fsdp_last_error());

  fsdp_runtime_t runtime = NULL;
  const char* bad_order[2] = {"l0", "decoder"};
  CHECK_CODE(fsdp_runtime_create(model, 2, bad_order, 1, 2, &runtime), FSDP_ERROR_UNKNOWN_NAME);
  CHECK(runtime == NULL, "no runtime on failure");
  CHECK(strstr(fsdp_last_error(), "'decoder'") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_runtime_create(model, 1, unit_order, 1, 2, &runtime), FSDP_ERROR_LIBRARY);
  CHECK(strstr(fsdp_last_error(), "l1") != NULL, "message names the missing unit: %s",
        fsdp_last_error());
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, &runtime));

  /* A wrong unit name: the code, and a message naming it. */
  CHECK_CODE(fsdp_begin_forward(runtime, "encoder"), FSDP_ERROR_UNKNOWN_NAME);
  CHECK(strstr(fsdp_last_error(), "'encoder'") != NULL, "message: %s", fsdp_last_error());
  /* Calls out of order. */
  CHECK_CODE(fsdp_begin_forward(runtime, "l1"), FSDP_ERROR_ORDER);
  CHECK(strstr(fsdp_last_error(), "expected 'l0'") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_end_forward(runtime, "l0"), FSDP_ERROR_ORDER);
  CHECK_CODE(fsdp_begin_backward(runtime, "l1"), FSDP_ERROR_ORDER);
  CHECK_CODE(fsdp_finish_step(runtime), FSDP_ERROR_ORDER);
  void* values = NULL;
  int64_t numel = 0;
  CHECK_CODE(fsdp_full(runtime, "l0.w", &values, &numel), FSDP_ERROR_STATE);
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK_CODE(fsdp_begin_forward(runtime, "l1"), FSDP_ERROR_ORDER); /* l0 still open */
  CHECK(strstr(fsdp_last_error(), "'l0' is open") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_grad(runtime, "l0.w", &values, &numel), FSDP_ERROR_STATE);
  CHECK(strstr(fsdp_last_error(), "backward scopes") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_full(runtime, "l1.w", &values, &numel), FSDP_ERROR_STATE); /* other unit */
  CHECK_CODE(fsdp_full(runtime, "l7.w", &values, &numel), FSDP_ERROR_UNKNOWN_NAME);
  CHECK_OK(fsdp_full(runtime, "l0.w", &values, &numel));
  CHECK(values != NULL && numel == HIDDEN * IN, "l0.w while gathered: %lld elements",
        (long long)numel);
  CHECK_CODE(fsdp_end_backward(runtime, "l0"), FSDP_ERROR_ORDER);
  CHECK_CODE(fsdp_finish_step(runtime), FSDP_ERROR_ORDER);
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  CHECK_CODE(fsdp_begin_forward(runtime, "l0"), FSDP_ERROR_ORDER); /* forward already ran */
  CHECK_CODE(fsdp_begin_backward(runtime, "l0"), FSDP_ERROR_ORDER);
  CHECK(strstr(fsdp_last_error(), "expected 'l1'") != NULL, "message: %s", fsdp_last_error());
  /* After all that, an evaluation step and a training step still work. */
  CHECK_OK(fsdp_finish_step(runtime));
  api_step(runtime, FSDP_FLOAT32, world_rank, 0);

  CHECK_CODE(fsdp_finalize(), FSDP_ERROR_STATE); /* handles alive */
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: error paths: ok\n");
  }
}

/* ---- checkpoints ---- */

/* Every parameter, whole, on every rank (fp64 models). */
static void copy_all(fsdp_model_t model, Parameters* out) {
  for (int i = 0; i < NPARAM; ++i) {
    CHECK_OK(fsdp_model_copy_parameter(model, parameter_names[i], parameter_of(out, i)));
  }
}

static void train_steps(fsdp_runtime_t runtime, fsdp_optimizer_t optimizer, fsdp_model_t model,
                        int first, int last) {
  for (int step = first; step < last; ++step) {
    api_step(runtime, FSDP_FLOAT64, world_rank, step);
    CHECK_OK(fsdp_optimizer_step(optimizer));
    CHECK_OK(fsdp_model_zero_grad(model));
  }
}

/* A file name in the working directory unique to this run: rank 0's process id, broadcast (the
 * np1, np2 and np3 runs of this test may run side by side), and what it holds. */
static void scratch_path(char* path, size_t size, const char* what) {
  long pid = (long)getpid();
  CHECK(MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Bcast of the pid");
  const int length = snprintf(path, size, "test_c_api_%ld_%s.h5", pid, what);
  CHECK(length > 0 && (size_t)length < size, "the scratch path is too long");
}

/* Rank 0 removes a file the test wrote, and checks that its temporary is gone too. */
static void remove_scratch(const char* path) {
  if (world_rank == 0) {
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* left = fopen(tmp, "rb");
    CHECK(left == NULL, "%s was left behind", tmp);
    CHECK(remove(path) == 0, "cannot remove %s", path);
  }
}

/* Saved after 2 AdamW steps by a full-sharded model, loaded by a layer-wise one with a fresh
 * optimizer: 2 more steps on each end bit for bit alike. Then fp32, and the error paths. */
static void test_checkpoints(void) {
  char path[80], bare[80], single_path[80], missing[80];
  scratch_path(path, sizeof path, "adamw");
  scratch_path(bare, sizeof bare, "parameters");
  scratch_path(single_path, sizeof single_path, "fp32");
  scratch_path(missing, sizeof missing, "missing");

  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  init_model(model, FSDP_FLOAT64);
  fsdp_runtime_t runtime = NULL;
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, &runtime));
  fsdp_optimizer_t optimizer = NULL;
  CHECK_OK(fsdp_optimizer_create_adamw(model, 0.01, 0.9, 0.999, 1e-8, 0.05, &optimizer));
  train_steps(runtime, optimizer, model, 0, 2);
  Parameters at_save, expected, got;
  copy_all(model, &at_save);
  /* The loss scaler's state goes into the file with the model's. */
  fsdp_loss_scaler_t scaler = NULL, other_scaler = NULL;
  CHECK_OK(fsdp_loss_scaler_create(0.0, 0.0, 0.0, 0, &scaler));
  CHECK_OK(fsdp_loss_scaler_create(0.0, 0.0, 0.0, 0, &other_scaler));
  CHECK_OK(fsdp_loss_scaler_set_state(scaler, 1024.0 / 3.0, 17, 2));
  /* So does an object of the caller's own: JSON text under a name. */
  const char* solver_state = "{\"time\": 0.5, \"iteration\": 120}";
  CHECK_OK(fsdp_checkpoint_set_object(model, "solver", solver_state));
  CHECK_CODE(fsdp_checkpoint_set_object(model, "solver", "{\"time\": "),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "object 'solver'") != NULL &&
            strstr(fsdp_last_error(), "is not valid JSON") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_checkpoint_set_object(model, "", "1"), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_checkpoint_set_object(model, "solver", NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_OK(fsdp_checkpoint_save(model, optimizer, scaler, path, 2, 7));
  train_steps(runtime, optimizer, model, 2, 4);
  copy_all(model, &expected);

  fsdp_model_t other = make_model(FSDP_FLOAT64, "layerwise");
  init_model(other, FSDP_FLOAT64);
  fsdp_runtime_t other_runtime = NULL;
  CHECK_OK(fsdp_runtime_create(other, 2, unit_order, 1, 2, &other_runtime));
  fsdp_optimizer_t other_optimizer = NULL;
  CHECK_OK(fsdp_optimizer_create_adamw(other, 0.01, 0.9, 0.999, 1e-8, 0.05, &other_optimizer));
  int64_t step = -1, epoch = -1;
  CHECK_OK(fsdp_checkpoint_set_object(other, "solver", "null")); /* the load fills it */
  CHECK_OK(fsdp_checkpoint_load(other, other_optimizer, other_scaler, path, &step, &epoch));
  {
    char text[64];
    size_t length = 0;
    CHECK_OK(fsdp_checkpoint_get_object(other, "solver", NULL, 0, &length));
    CHECK(length == strlen(solver_state), "object length %zu", length);
    CHECK_CODE(fsdp_checkpoint_get_object(other, "solver", text, length, NULL),
               FSDP_ERROR_INVALID_ARGUMENT);
    CHECK_OK(fsdp_checkpoint_get_object(other, "solver", text, sizeof text, &length));
    CHECK(strcmp(text, solver_state) == 0, "loaded object '%s', saved '%s'", text, solver_state);
    CHECK_CODE(fsdp_checkpoint_get_object(other, "reader", text, sizeof text, NULL),
               FSDP_ERROR_UNKNOWN_NAME);
    CHECK(strstr(fsdp_last_error(), "its objects are 'solver'") != NULL, "message: %s",
          fsdp_last_error());
  }
  CHECK(step == 2 && epoch == 7, "loaded step %lld epoch %lld, saved 2 and 7", (long long)step,
        (long long)epoch);
  double scale = 0;
  int64_t clean_steps = 0, skipped_steps = 0;
  CHECK_OK(fsdp_loss_scaler_get_state(other_scaler, &scale, &clean_steps, &skipped_steps));
  CHECK(scale == 1024.0 / 3.0 && clean_steps == 17 && skipped_steps == 2,
        "loaded scaler state %.17g %lld %lld, saved 1024/3 17 2", scale, (long long)clean_steps,
        (long long)skipped_steps);
  copy_all(other, &got);
  CHECK(memcmp(&got, &at_save, sizeof got) == 0, "the loaded parameters differ from the saved");
  train_steps(other_runtime, other_optimizer, other, 2, 4);
  copy_all(other, &got);
  CHECK(memcmp(&got, &expected, sizeof got) == 0,
        "2 steps after loading differ from 2 steps after saving (optimizer state not restored?)");

  /* In the background: the file holds the parameters of the call, published by finish (or
   * try_finish) and not before; a load finishes a pending save first. */
  {
    char background[80];
    scratch_path(background, sizeof background, "background");
    copy_all(model, &got); /* as trained to step 4 */
    CHECK_OK(fsdp_checkpoint_save_in_background(model, optimizer, NULL, background, 4, 7));
    train_steps(runtime, optimizer, model, 4, 5); /* the model moves on at once */
    int finished = -1;
    CHECK_OK(fsdp_checkpoint_try_finish(model, &finished));
    CHECK(finished == 0 || finished == 1, "finished %d", finished);
    CHECK_OK(fsdp_checkpoint_finish(model));
    CHECK_OK(fsdp_checkpoint_try_finish(model, &finished));
    CHECK(finished == 1, "try_finish after finish: %d", finished);
    /* The snapshot (this rank's pieces and their optimizer state, kept for the next save) is in
     * the memory report. */
    int64_t snapshot = 0, pieces = 0, state = 0;
    CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_CHECKPOINT_SNAPSHOT, &snapshot, NULL));
    CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_PARAMETER_SHARDS, &pieces, NULL));
    CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_OPTIMIZER_STATE, &state, NULL));
    /* (The optimizer state's buffers also hold the pieces' padding, which is not saved.) */
    CHECK(snapshot > pieces && snapshot <= pieces + state,
          "snapshot %lld bytes for pieces of %lld and optimizer state of %lld", (long long)snapshot,
          (long long)pieces, (long long)state);
    Parameters loaded;
    CHECK_OK(fsdp_checkpoint_load(other, other_optimizer, NULL, background, &step, &epoch));
    copy_all(other, &loaded);
    CHECK(step == 4 && memcmp(&loaded, &got, sizeof got) == 0,
          "the background save holds other parameters than at its call (step %lld)",
          (long long)step);
    CHECK_OK(fsdp_checkpoint_save_in_background(model, optimizer, NULL, background, 5, 7));
    CHECK_OK(fsdp_checkpoint_load(model, optimizer, NULL, background, &step, NULL));
    CHECK(step == 5, "a load did not finish the pending save first: step %lld", (long long)step);
    CHECK_CODE(fsdp_checkpoint_try_finish(model, NULL), FSDP_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(fsdp_checkpoint_finish(NULL), FSDP_ERROR_INVALID_ARGUMENT);
    remove_scratch(background);
  }

  /* The parameters alone, as pretrained weights. */
  CHECK_OK(fsdp_load_parameters(other, path));
  copy_all(other, &got);
  CHECK(memcmp(&got, &at_save, sizeof got) == 0, "fsdp_load_parameters gave other values");

  /* fp32, the other branch of the dispatch: saved without an optimizer by a full-sharded
   * model, loaded bit for bit by a layer-wise one; the fp64 checkpoint is refused by dtype. */
  {
    fsdp_model_t single = make_model(FSDP_FLOAT32, "full");
    init_model(single, FSDP_FLOAT32);
    CHECK_OK(fsdp_checkpoint_save(single, NULL, NULL, single_path, 5, 1));
    fsdp_model_t single_other = make_model(FSDP_FLOAT32, "layerwise"); /* all zero */
    CHECK_CODE(fsdp_checkpoint_load(single_other, NULL, NULL, path, NULL, NULL),
               FSDP_ERROR_MISMATCH);
    CHECK(
        strstr(fsdp_last_error(), "model/l0.w: dtype fp64 in the file, fp32 in the model") != NULL,
        "message: %s", fsdp_last_error());
    int64_t single_step = -1;
    CHECK_OK(fsdp_checkpoint_load(single_other, NULL, NULL, single_path, &single_step, NULL));
    CHECK(single_step == 5, "loaded step %lld, saved 5", (long long)single_step);
    for (int i = 0; i < NPARAM; ++i) {
      float saved[HIDDEN * IN], loaded[HIDDEN * IN];
      CHECK_OK(fsdp_model_copy_parameter(single, parameter_names[i], saved));
      CHECK_OK(fsdp_model_copy_parameter(single_other, parameter_names[i], loaded));
      CHECK(memcmp(saved, loaded, (size_t)parameter_numel[i] * sizeof(float)) == 0,
            "fp32 parameter %s differs after loading", parameter_names[i]);
    }
    fsdp_model_destroy(single_other);
    fsdp_model_destroy(single);
  }

  /* Errors: every rank gets the same code, and nothing changes. */
  CHECK_CODE(fsdp_checkpoint_save(model, other_optimizer, NULL, path, 2, 0),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "another model") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_checkpoint_load(other, optimizer, NULL, path, NULL, NULL),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "another model") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_checkpoint_save(model, NULL, NULL, path, -1, 0), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_checkpoint_save(model, NULL, NULL, NULL, 0, 0), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "the checkpoint path is NULL or empty") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_CODE(fsdp_checkpoint_load(other, NULL, NULL, "", NULL, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_load_parameters(other, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_checkpoint_load(NULL, NULL, NULL, path, NULL, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "the model handle is NULL") != NULL, "message: %s",
        fsdp_last_error());
  {
    fsdp_model_t unsharded = NULL;
    const int64_t shape[1] = {HIDDEN};
    CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &unsharded));
    CHECK_OK(fsdp_model_add_parameter(unsharded, "l0.b", 1, shape, "l0", 0));
    CHECK_CODE(fsdp_checkpoint_save(unsharded, NULL, NULL, path, 0, 0), FSDP_ERROR_STATE);
    CHECK(strstr(fsdp_last_error(), "not sharded") != NULL, "message: %s", fsdp_last_error());
    CHECK_CODE(fsdp_checkpoint_load(unsharded, NULL, NULL, path, NULL, NULL), FSDP_ERROR_STATE);
    CHECK_CODE(fsdp_load_parameters(unsharded, path), FSDP_ERROR_STATE);
    fsdp_model_destroy(unsharded);
  }
  CHECK_CODE(fsdp_checkpoint_load(other, other_optimizer, NULL, missing, NULL, NULL),
             FSDP_ERROR_IO);
  CHECK(strstr(fsdp_last_error(), missing) != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_load_parameters(other, missing), FSDP_ERROR_IO);
  CHECK(strstr(fsdp_last_error(), missing) != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_checkpoint_save(model, NULL, NULL, "/nonexistent-directory/c.h5", 0, 0),
             FSDP_ERROR_IO);
  CHECK(strstr(fsdp_last_error(), "/nonexistent-directory/c.h5") != NULL, "message: %s",
        fsdp_last_error());
  /* A checkpoint without optimizer state, loaded with an optimizer: refused, nothing changes. */
  CHECK_OK(fsdp_checkpoint_save(model, NULL, NULL, bare, 4, 0));
  copy_all(other, &expected);
  CHECK_CODE(fsdp_checkpoint_load(other, other_optimizer, NULL, bare, NULL, NULL),
             FSDP_ERROR_MISMATCH);
  CHECK(strstr(fsdp_last_error(), bare) != NULL &&
            strstr(fsdp_last_error(), "holds no optimizer state") != NULL,
        "message: %s", fsdp_last_error());
  /* ... and without a loss scaler's state, loaded with a scaler: refused, the scaler unchanged. */
  CHECK_CODE(fsdp_checkpoint_load(other, NULL, scaler, bare, NULL, NULL), FSDP_ERROR_MISMATCH);
  CHECK(strstr(fsdp_last_error(), "no state for object 'loss_scaler' in the file") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_OK(fsdp_loss_scaler_get_state(scaler, &scale, NULL, NULL));
  CHECK(scale == 1024.0 / 3.0, "the refused load changed the scale to %g", scale);
  /* ... and without an object the model has: refused, every object unchanged. */
  CHECK_OK(fsdp_checkpoint_set_object(other, "reader", "[1, 2]"));
  CHECK_OK(fsdp_checkpoint_set_object(other, "solver", "0"));
  CHECK_CODE(fsdp_checkpoint_load(other, NULL, NULL, path, NULL, NULL), FSDP_ERROR_MISMATCH);
  CHECK(strstr(fsdp_last_error(),
               "no state for object 'reader' in the file (it holds "
               "'loss_scaler', 'solver')") != NULL,
        "message: %s", fsdp_last_error());
  {
    char text[64];
    CHECK_OK(fsdp_checkpoint_get_object(other, "solver", text, sizeof text, NULL));
    CHECK(strcmp(text, "0") == 0, "a refused load changed object 'solver' to '%s'", text);
  }
  /* A model's own object may not take the loss scaler's name when a scaler is given. */
  CHECK_OK(fsdp_checkpoint_set_object(other, "loss_scaler", "1"));
  CHECK_CODE(fsdp_checkpoint_save(other, NULL, scaler, bare, 0, 0), FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_loss_scaler_destroy(scaler);
  fsdp_loss_scaler_destroy(other_scaler);
  copy_all(other, &got);
  CHECK(memcmp(&got, &expected, sizeof got) == 0, "a refused load changed the model");
  {
    fsdp_model_t wider = NULL;
    CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &wider));
    const int64_t shapes[NPARAM][2] = {{HIDDEN, IN + 1}, {HIDDEN, 0}, {OUT, HIDDEN}, {OUT, 0}};
    const int ndims[NPARAM] = {2, 1, 2, 1};
    for (int i = 0; i < NPARAM; ++i) {
      CHECK_OK(fsdp_model_add_parameter(wider, parameter_names[i], ndims[i], shapes[i],
                                        i < 2 ? "l0" : "l1", 0));
    }
    CHECK_OK(fsdp_model_shard(wider, MPI_Comm_c2f(MPI_COMM_WORLD), "full"));
    double before[HIDDEN * (IN + 1)], after[HIDDEN * (IN + 1)];
    CHECK_OK(fsdp_model_copy_parameter(wider, "l0.w", before));
    CHECK_CODE(fsdp_checkpoint_load(wider, NULL, NULL, path, NULL, NULL), FSDP_ERROR_MISMATCH);
    CHECK(strstr(fsdp_last_error(), "model/l0.w: shape [5, 3] in the file, [5, 4] in the model") !=
                  NULL &&
              strstr(fsdp_last_error(), path) != NULL,
          "message: %s", fsdp_last_error());
    CHECK_OK(fsdp_model_copy_parameter(wider, "l0.w", after));
    CHECK(memcmp(before, after, sizeof before) == 0, "a refused load changed the model");
    fsdp_model_destroy(wider);
  }

  fsdp_optimizer_destroy(other_optimizer);
  fsdp_runtime_destroy(other_runtime);
  fsdp_model_destroy(other);
  fsdp_optimizer_destroy(optimizer);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier");
  remove_scratch(path);
  remove_scratch(bare);
  remove_scratch(single_path);
  if (world_rank == 0) {
    printf("test_c_api: checkpoints: ok\n");
  }
}

/* ---- gradient norm and clipping, the memory report, units kept gathered ---------------- */

static int64_t memory_current(fsdp_model_t model, int category) {
  int64_t current = -1;
  CHECK_OK(fsdp_memory_bytes(model, category, &current, NULL));
  return current;
}

/* The reference gradient of step 0 (averaged over the ranks) and its L2 norm. */
static double reference_gradient(int world, Parameters* g) {
  Parameters p;
  initial_parameters(&p);
  memset(g, 0, sizeof *g);
  for (int r = 0; r < world; ++r) {
    batch_gradient(&p, r, 0, g);
  }
  double sum = 0.0;
  for (int i = 0; i < NPARAM; ++i) {
    for (int64_t e = 0; e < parameter_numel[i]; ++e) {
      parameter_of(g, i)[e] /= world;
      sum += parameter_of(g, i)[e] * parameter_of(g, i)[e];
    }
  }
  return sqrt(sum);
}

static void test_clipping(void) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Parameters g;
  const double expected = reference_gradient(world, &g);
  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  init_model(model, FSDP_FLOAT64);
  fsdp_runtime_t runtime = NULL;
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 1, 2, &runtime));
  fsdp_optimizer_t sgd = NULL;
  CHECK_OK(fsdp_optimizer_create_sgd(model, 0.5, 0.0, 0.0, 0, 0.0, &sgd));
  api_step(runtime, FSDP_FLOAT64, world_rank, 0);

  double norm = -1.0;
  CHECK_OK(fsdp_grad_norm(model, &norm));
  CHECK(fabs(norm - expected) <= 1e-12 * expected, "grad norm %.17g, by hand %.17g", norm,
        expected);
  /* A max_norm above the norm changes nothing. */
  CHECK_OK(fsdp_clip_grad_norm(model, 2.0 * expected, &norm));
  CHECK_OK(fsdp_grad_norm(model, &norm));
  CHECK(fabs(norm - expected) <= 1e-12 * expected, "clipping above the norm changed it: %.17g",
        norm);
  /* Refused before anything changes or communicates. */
  const double refused[] = {0.0, -1.0, NAN, INFINITY};
  for (int r = 0; r < 4; ++r) {
    CHECK_CODE(fsdp_clip_grad_norm(model, refused[r], &norm), FSDP_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(fsdp_last_error(), "max_norm must be a finite number > 0") != NULL, "message: %s",
          fsdp_last_error());
  }
  CHECK_CODE(fsdp_grad_norm(model, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_grad_norm(NULL, &norm), FSDP_ERROR_INVALID_ARGUMENT);

  /* Half the norm: the returned norm is the one before, the gradient is scaled, and the SGD step
   * that follows moves each parameter by lr * coefficient * gradient. */
  const double max_norm = 0.5 * expected;
  double before = -1.0;
  CHECK_OK(fsdp_clip_grad_norm(model, max_norm, &before));
  CHECK(fabs(before - expected) <= 1e-12 * expected, "clip returned %.17g, the norm is %.17g",
        before, expected);
  const double coefficient = max_norm / (expected + 1e-6);
  CHECK_OK(fsdp_grad_norm(model, &norm));
  CHECK(fabs(norm - coefficient * expected) <= 1e-12 * expected, "clipped norm %.17g, want %.17g",
        norm, coefficient * expected);
  CHECK_OK(fsdp_optimizer_step(sgd));
  Parameters got, p;
  initial_parameters(&p);
  copy_all(model, &got);
  for (int i = 0; i < NPARAM; ++i) {
    for (int64_t e = 0; e < parameter_numel[i]; ++e) {
      const double want = parameter_of(&p, i)[e] - 0.5 * coefficient * parameter_of(&g, i)[e];
      CHECK(fabs(parameter_of(&got, i)[e] - want) <= 1e-14,
            "%s[%lld] = %.17g after a clipped step, "
            "expected %.17g",
            parameter_names[i], (long long)e, parameter_of(&got, i)[e], want);
    }
  }
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: clipping: ok\n");
  }
}

static void test_memory_report(void) {
  CHECK(strcmp(fsdp_memory_category_name(FSDP_MEMORY_PARAMETER_SHARDS), "parameter_shards") == 0,
        "name %s", fsdp_memory_category_name(FSDP_MEMORY_PARAMETER_SHARDS));
  CHECK(
      strcmp(fsdp_memory_category_name(FSDP_MEMORY_RESIDENT_GRADIENTS), "resident_gradients") == 0,
      "name %s", fsdp_memory_category_name(FSDP_MEMORY_RESIDENT_GRADIENTS));
  CHECK(strcmp(fsdp_memory_category_name(FSDP_MEMORY_TOTAL), "total") == 0, "name %s",
        fsdp_memory_category_name(FSDP_MEMORY_TOTAL));
  CHECK(fsdp_memory_category_name(-1) == NULL && fsdp_memory_category_name(11) == NULL,
        "names out of range");

  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  init_model(model, FSDP_FLOAT64);
  /* This rank's pieces: 1/N of the parameters plus padding (< N elements per parameter). */
  int64_t all = memory_current(model, FSDP_MEMORY_PARAMETER_SHARDS);
  CHECK(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
        "MPI_Allreduce");
  int64_t bytes = 0;
  for (int i = 0; i < NPARAM; ++i) {
    bytes += parameter_numel[i] * 8;
  }
  CHECK(all >= bytes && all <= bytes + NPARAM * (world - 1) * 8,
        "the pieces hold %lld bytes over the ranks; the parameters are %lld", (long long)all,
        (long long)bytes);
  const int64_t pieces = memory_current(model, FSDP_MEMORY_PARAMETER_SHARDS);
  CHECK(memory_current(model, FSDP_MEMORY_GRADIENT_SHARDS) == pieces, "gradient pieces %lld",
        (long long)memory_current(model, FSDP_MEMORY_GRADIENT_SHARDS));
  CHECK(memory_current(model, FSDP_MEMORY_OPTIMIZER_STATE) == 0, "optimizer state before one");

  fsdp_runtime_t runtime = NULL;
  CHECK_OK(fsdp_runtime_create(model, 2, unit_order, 0, 2, &runtime));
  fsdp_optimizer_t adam = NULL;
  CHECK_OK(fsdp_optimizer_create_adam(model, 0.01, 0.9, 0.999, 1e-8, 0.0, &adam));
  CHECK_OK(fsdp_memory_reset_peaks(model));
  int64_t total = 0, total_peak = 0;
  CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_TOTAL, &total, &total_peak));
  CHECK(total_peak == total, "after reset_peaks the peak %lld is not the current %lld",
        (long long)total_peak, (long long)total);
  /* A gathered unit counts its whole parameters (l0: HIDDEN*IN + HIDDEN doubles, at least). */
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK(memory_current(model, FSDP_MEMORY_GATHERED_PARAMETERS) >= (HIDDEN * IN + HIDDEN) * 8,
        "gathered l0: %lld bytes",
        (long long)memory_current(model, FSDP_MEMORY_GATHERED_PARAMETERS));
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  CHECK_OK(fsdp_finish_step(runtime));
  CHECK(memory_current(model, FSDP_MEMORY_GATHERED_PARAMETERS) == 0, "gathered after the step");
  int64_t gathered_peak = 0;
  CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_GATHERED_PARAMETERS, NULL, &gathered_peak));
  CHECK(gathered_peak >= (HIDDEN * IN + HIDDEN) * 8, "gathered peak %lld",
        (long long)gathered_peak);
  CHECK_OK(fsdp_memory_bytes(model, FSDP_MEMORY_TOTAL, NULL, &total_peak));
  CHECK(total_peak >= total + (HIDDEN * IN + HIDDEN) * 8, "total peak %lld, current %lld",
        (long long)total_peak, (long long)total);
  /* Adam holds two moments per element of the real pieces (padding has none) once it has
   * stepped. */
  api_step(runtime, FSDP_FLOAT64, world_rank, 0);
  CHECK_OK(fsdp_optimizer_step(adam));
  int64_t real_elements = 0;
  for (int i = 0; i < NPARAM; ++i) {
    int64_t first = 0, count = 0;
    CHECK_OK(fsdp_model_parameter_piece(model, parameter_names[i], &first, &count));
    real_elements += count;
  }
  CHECK(memory_current(model, FSDP_MEMORY_OPTIMIZER_STATE) == 2 * 8 * real_elements,
        "Adam state %lld bytes for %lld elements of pieces",
        (long long)memory_current(model, FSDP_MEMORY_OPTIMIZER_STATE), (long long)real_elements);
  int64_t sum = 0;
  for (int c = 0; c < FSDP_MEMORY_TOTAL; ++c) {
    sum += memory_current(model, c);
  }
  CHECK(sum == memory_current(model, FSDP_MEMORY_TOTAL), "categories add to %lld, total %lld",
        (long long)sum, (long long)memory_current(model, FSDP_MEMORY_TOTAL));

  CHECK_CODE(fsdp_memory_bytes(model, 11, &total, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(fsdp_last_error(), "got 11") != NULL, "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_memory_bytes(model, -1, &total, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_memory_reset_peaks(NULL), FSDP_ERROR_INVALID_ARGUMENT);
  {
    fsdp_model_t unsharded = NULL;
    CHECK_OK(fsdp_model_create(FSDP_FLOAT64, &unsharded));
    CHECK_CODE(fsdp_memory_bytes(unsharded, FSDP_MEMORY_TOTAL, &total, NULL), FSDP_ERROR_STATE);
    fsdp_model_destroy(unsharded);
  }
  /* The state is the optimizer's: it goes with it, and the model lives on without it. */
  fsdp_optimizer_destroy(adam);
  CHECK(memory_current(model, FSDP_MEMORY_OPTIMIZER_STATE) == 0,
        "optimizer state after its optimizer was destroyed: %lld bytes",
        (long long)memory_current(model, FSDP_MEMORY_OPTIMIZER_STATE));
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: memory report: ok\n");
  }
}

/* Gathers and the gathered bytes of one training step, l0 kept gathered or not. Without
 * prefetch: with it, l0's backward gather starts in l1's forward scope either way. */
static void step_keeping(int keep, int64_t* gathers, int64_t* gathered_in_l1, Parameters* after) {
  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  init_model(model, FSDP_FLOAT64);
  fsdp_runtime_t runtime = NULL;
  const char* const kept[1] = {"l0"};
  CHECK_OK(fsdp_runtime_create_keep_gathered(model, 2, unit_order, 0, 2, keep, kept, &runtime));
  fsdp_optimizer_t sgd = NULL;
  CHECK_OK(fsdp_optimizer_create_sgd(model, 0.1, 0.0, 0.0, 0, 0.0, &sgd));
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  *gathered_in_l1 = memory_current(model, FSDP_MEMORY_GATHERED_PARAMETERS);
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  CHECK_OK(fsdp_finish_step(runtime)); /* an evaluation step: nothing stays gathered */
  CHECK(memory_current(model, FSDP_MEMORY_GATHERED_PARAMETERS) == 0, "gathered after the step");
  int64_t scopes = -1, before = -1, prefetched = -1, ready = -1;
  double wait_s = -1.0;
  CHECK_OK(fsdp_runtime_stats(runtime, &scopes, &before, &prefetched, &ready, &wait_s));
  CHECK(scopes == 2 && before == 2 && prefetched == 0 && ready >= 0 && wait_s >= 0.0,
        "after a forward step: %lld scopes, %lld gathers, %lld prefetched, %lld ready, %g s",
        (long long)scopes, (long long)before, (long long)prefetched, (long long)ready, wait_s);
  api_step(runtime, FSDP_FLOAT64, world_rank, 0);
  CHECK_OK(fsdp_runtime_stats(runtime, NULL, gathers, NULL, NULL, NULL));
  *gathers -= before;
  CHECK_OK(fsdp_optimizer_step(sgd));
  copy_all(model, after);
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
}

static void test_keep_gathered(void) {
  int64_t gathers = 0, kept_gathers = 0, gathered = 0, kept_gathered = 0;
  Parameters plain, kept;
  step_keeping(0, &gathers, &gathered, &plain);
  step_keeping(1, &kept_gathers, &kept_gathered, &kept);
  /* l1 is last: it stays gathered into its backward either way; l0 is gathered again for its
   * backward unless kept. */
  CHECK(gathers == 3 && kept_gathers == 2, "a training step gathers %lld times, %lld keeping l0",
        (long long)gathers, (long long)kept_gathers);
  CHECK(kept_gathered >= gathered + (HIDDEN * IN + HIDDEN) * 8,
        "in l1's forward scope %lld bytes are gathered keeping l0, %lld without",
        (long long)kept_gathered, (long long)gathered);
  CHECK(memcmp(&plain, &kept, sizeof plain) == 0, "keeping l0 gathered changed the result");

  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  fsdp_runtime_t runtime = NULL;
  const char* const unknown[1] = {"decoder"};
  CHECK_CODE(fsdp_runtime_create_keep_gathered(model, 2, unit_order, 1, 2, 1, unknown, &runtime),
             FSDP_ERROR_UNKNOWN_NAME);
  CHECK(runtime == NULL && strstr(fsdp_last_error(), "'decoder'") != NULL &&
            strstr(fsdp_last_error(), "fsdp_runtime_create_keep_gathered") != NULL,
        "message: %s", fsdp_last_error());
  CHECK_CODE(fsdp_runtime_create_keep_gathered(model, 2, unit_order, 1, 2, 1, NULL, &runtime),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_runtime_create_keep_gathered(model, 2, unit_order, 1, 2, -1, unknown, &runtime),
             FSDP_ERROR_INVALID_ARGUMENT);
  CHECK_CODE(fsdp_runtime_stats(NULL, NULL, NULL, NULL, NULL, NULL), FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: keep gathered: ok\n");
  }
}

/* A step with l0.w also used by l1 (tied): its gradient is written in both backward scopes, 1
 * in l1's and 2 in l0's. The same step untied, with l0 writing 3, must end where it ends. */
static void add_to(fsdp_runtime_t runtime, const char* parameter, double value) {
  void* values = NULL;
  int64_t numel = 0;
  CHECK_OK(fsdp_grad(runtime, parameter, &values, &numel));
  for (int64_t i = 0; i < numel; ++i) {
    ((double*)values)[i] += value;
  }
}

static void step_tied(int tied, Parameters* after) {
  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  init_model(model, FSDP_FLOAT64);
  fsdp_runtime_t runtime = NULL;
  const char* const parameters[1] = {"l0.w"};
  const char* const users[1] = {"l1"};
  CHECK_OK(fsdp_runtime_create_tied(model, 2, unit_order, 1, 2, 0, NULL, tied, parameters, users,
                                    &runtime));
  fsdp_optimizer_t sgd = NULL;
  CHECK_OK(fsdp_optimizer_create_sgd(model, 0.1, 0.0, 0.0, 0, 0.0, &sgd));
  void* values = NULL;
  int64_t numel = 0;
  CHECK_OK(fsdp_begin_forward(runtime, "l0"));
  CHECK_OK(fsdp_end_forward(runtime, "l0"));
  CHECK_OK(fsdp_begin_forward(runtime, "l1"));
  if (tied) {
    CHECK_OK(fsdp_full(runtime, "l0.w", &values, &numel));
    CHECK(numel == HIDDEN * IN, "l0.w has %lld elements in l1's scope", (long long)numel);
  } else {
    CHECK_CODE(fsdp_full(runtime, "l0.w", &values, &numel), FSDP_ERROR_STATE);
  }
  CHECK_OK(fsdp_end_forward(runtime, "l1"));
  CHECK_OK(fsdp_begin_backward(runtime, "l1"));
  if (tied) {
    add_to(runtime, "l0.w", 1.0);
  }
  CHECK_OK(fsdp_end_backward(runtime, "l1"));
  CHECK_OK(fsdp_begin_backward(runtime, "l0"));
  add_to(runtime, "l0.w", tied ? 2.0 : 3.0);
  add_to(runtime, "l0.b", 1.0);
  CHECK_OK(fsdp_end_backward(runtime, "l0"));
  CHECK_OK(fsdp_finish_step(runtime));
  CHECK_OK(fsdp_optimizer_step(sgd));
  copy_all(model, after);
  fsdp_optimizer_destroy(sgd);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
}

static void test_tied_parameters(void) {
  Parameters untied, tied;
  step_tied(0, &untied);
  step_tied(1, &tied);
  CHECK(memcmp(&untied, &tied, sizeof tied) == 0, "a tied gradient is not the sum of its uses");

  fsdp_model_t model = make_model(FSDP_FLOAT64, "full");
  fsdp_runtime_t runtime = NULL;
  const char* const backwards[1] = {"l1.w"};
  const char* const earlier[1] = {"l0"};
  CHECK_CODE(fsdp_runtime_create_tied(model, 2, unit_order, 1, 2, 0, NULL, 1, backwards, earlier,
                                      &runtime),
             FSDP_ERROR_LIBRARY);
  CHECK(runtime == NULL && strstr(fsdp_last_error(), "runs before it") != NULL, "message: %s",
        fsdp_last_error());
  CHECK_CODE(
      fsdp_runtime_create_tied(model, 2, unit_order, 1, 2, 0, NULL, 1, backwards, NULL, &runtime),
      FSDP_ERROR_INVALID_ARGUMENT);
  fsdp_model_destroy(model);
  if (world_rank == 0) {
    printf("test_c_api: tied parameters: ok\n");
  }
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  CHECK_OK(fsdp_initialize());

  const Rule sgd = {0, 0.1, 0.9, 0.01};
  const Rule adamw = {1, 0.01, 0.0, 0.05};
  train_and_compare(FSDP_FLOAT64, "full", sgd, 3, 1, 2, 1e-12, "fp64 full SGD+momentum");
  train_and_compare(FSDP_FLOAT64, "full", adamw, 3, 1, 1, 1e-12, "fp64 full AdamW limit 1");
  train_and_compare(FSDP_FLOAT64, "layerwise", adamw, 2, 0, 2, 1e-12,
                    "fp64 layerwise AdamW no prefetch");
  train_and_compare(FSDP_FLOAT32, "full", sgd, 3, 1, 2, 1e-5, "fp32 full SGD+momentum");
  test_modes();
  test_mixed_precision();
  test_loss_scaler();
  test_init_with_and_sgd_rule();
  test_lr_schedule();
  test_gradient_accumulation();
  test_overlap();
  test_optimizer_in_backward();
  test_frozen_parameters();
  test_errors();
  test_checkpoints();
  test_clipping();
  test_memory_report();
  test_keep_gathered();
  test_tied_parameters();

  CHECK_OK(fsdp_finalize());
  MPI_Finalize();
  if (world_rank == 0) {
    printf("test_c_api: all checks passed\n");
  }
  return 0;
}
