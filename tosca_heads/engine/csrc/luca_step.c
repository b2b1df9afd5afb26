/* One SGD step of LuCA + cosine classifier + cross-entropy + L1 for G configurations, fused.

   The same arithmetic as tosca_heads/engine/kernels.py (LucaStep) followed by optim.py
   (GroupSGD), written as a few passes over each [b, d] activation instead of ~100 separate
   PyTorch operations. On a CPU a step's matmuls are tiny (48 x 768 x 48), so the element-wise
   work and its per-operation overhead cost more than the matmuls; here the matmuls go to the BLAS
   PyTorch links (its sgemm_, passed in as a function pointer, so they run on the same MKL
   threads) and everything else is a handful of vectorisable loops.

   Layout conventions (row-major, as the Python engine): weights are kept transposed against
   nn.Linear (down.weight is [d, r]), bottlenecks are zero-padded to the group's largest r and s
   (padding stays exactly 0: GELU(0) = ReLU(0) = 0 and the outgoing weights are 0).
   Compiled on first use by tosca_heads/engine/native.py; no Python headers needed. */

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const float *, const float *, const int *, const float *, const int *,
                         const float *, float *, const int *);

enum { FLOW_TOSCA = 0, FLOW_TOSCA_R = 1, FLOW_ADAPTER = 2, FLOW_CALIBRATOR = 3 };

/* Where each parameter starts in a configuration's flat vector; -1 where the flow has none. */
typedef struct {
    int64_t down_w, down_b, up_w, up_b, norm_w, norm_b, cal_down_w, cal_up_w;
} Slots;

/* Mirrors the ctypes Structure in native.py field by field. */
typedef struct {
    int64_t groups, batch, dim, r, s, classes, flow, track;
    int64_t param_size;
    Slots off;
    const float *features; /* [n, d] this epoch's training features */
    const int64_t *targets; /* [n] class ids */
    const int64_t *index;   /* [G, index_stride]: this batch's rows, per configuration */
    int64_t index_stride;
    float *flat, *grad_flat, *buf_flat;       /* [G, P] */
    float *weight, *grad_weight, *buf_weight; /* [G, C, d] */
    float *sigma, *grad_sigma, *buf_sigma;    /* [G] */
    const float *neg_lr, *momentum, *decay, *l1; /* [G] */
    double *epoch_loss; /* [G] += CE loss of this step */
    double *loss_sum;   /* [G] += (CE + l1 * |theta|_1) * b, when track */
    int64_t *correct;   /* [G] += correct predictions, when track */
    float *work;        /* tosca_workspace_floats() floats */
    sgemm_fn gemm;
} StepArgs;

/* The module outputs of many rows (evaluation, prototypes): no gradient, no update. */
typedef struct {
    int64_t groups, rows, dim, r, s, flow, normalize; /* normalize: unit rows, as F.normalize */
    int64_t param_size;
    Slots off;
    const float *params; /* [G, P] */
    const float *x;      /* [rows, d], shared by every configuration */
    float *out;          /* [G, rows, d] */
    float *work;         /* tosca_forward_workspace_floats() floats */
    sgemm_fn gemm;
} ForwardArgs;

static const float LN_EPS = 1e-5f;
static const float NORM_EPS = 1e-12f;

/* Row-major C[m, n] = op(A)[m, k] @ op(B)[k, n] + beta C through column-major sgemm (C^T = B^T A^T).
   ta: A is stored [k, m]; tb: B is stored [n, k]. lda/ldb/ldc are the stored row lengths. */
static void matmul(sgemm_fn gemm, int ta, int tb, int m, int n, int k, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    const char opa = ta ? 'T' : 'N', opb = tb ? 'T' : 'N';
    const float alpha = 1.0f;
    if (m == 0 || n == 0) return;
    gemm(&opb, &opa, &n, &m, &k, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
}

/* exp(x) to about 1 ulp, branch-free so that loops calling it vectorise (Cody-Waite reduction,
   degree-6 polynomial); flushes below -87.3 to 0 and clamps above 88.7 (about 3.3e38). */
static inline float fast_exp(float x) {
    x = x < -104.0f ? -104.0f : (x > 88.7f ? 88.7f : x);
    /* round to nearest by the 1.5 * 2^23 trick (no call, so the loop vectorises) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* 2^n in two halves keeps n + 127 inside the exponent range for n down to -151 */
    int32_t ni = (int32_t)n;
    int32_t half = ni >> 1;
    union { int32_t i; float f; } s1, s2;
    s1.i = (half + 127) << 23;
    s2.i = (ni - half + 127) << 23;
    return p * s1.f * s2.f;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

/* erf to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26), branch-free so that loops vectorise;
   GELU only ever uses 1 + erf, where an absolute error of 1.5e-7 is float32 rounding. */
static inline float erf_approx(float x) {
    float ax = x < 0.0f ? -x : x;
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                  0.254829592f) * t;
    float y = 1.0f - poly * fast_exp(-ax * ax);
    return x < 0.0f ? -y : y;
}

/* exact (erf) GELU and its derivative, as F.gelu / ATen's gelu_backward */
static inline float gelu(float h) { return h * 0.5f * (1.0f + erf_approx(h * (float)M_SQRT1_2)); }
static inline float gelu_grad(float h) {
    const float beta = (float)(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    float cdf = 0.5f * (1.0f + erf_approx(h * (float)M_SQRT1_2));
    float pdf = fast_exp(-0.5f * h * h) * beta;
    return cdf + h * pdf;
}

#define STEP_BUFFERS 23 /* the take() calls of step_one; each may round up by 15 floats */

/* Floats of scratch one configuration's step needs (reused across configurations). */
int64_t tosca_workspace_floats(int64_t batch, int64_t dim, int64_t r, int64_t s, int64_t classes) {
    return batch * (9 * dim + 4 * r + 2 * s + 2 * classes + 8) + classes * (2 * dim + 1) +
           16 * STEP_BUFFERS;
}

static float *take(float **cursor, int64_t count) {
    float *out = *cursor;
    *cursor += (count + 15) & ~(int64_t)15; /* 64-byte steps keep every buffer aligned alike */
    return out;
}

/* x / max(|x|, eps) per row of [rows, d]; keeps |x| and the denominator for the backward */
static void normalize_rows(const float *x, float *unit, float *norm, float *denom, int rows, int d) {
    for (int i = 0; i < rows; ++i) {
        const float *xi = x + (int64_t)i * d;
        float *ui = unit + (int64_t)i * d;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int j = 0; j < d; ++j) acc += xi[j] * xi[j];
        float n = sqrtf(acc), den = n > NORM_EPS ? n : NORM_EPS;
        norm[i] = n;
        denom[i] = den;
        float inv = 1.0f / den;
        for (int j = 0; j < d; ++j) ui[j] = xi[j] * inv;
    }
}

/* gradient through x / max(|x|, eps): (g - u <u, g> [|x| >= eps]) / max(|x|, eps), in place on g */
static void normalize_backward(float *g, const float *unit, const float *norm, const float *denom,
                               int rows, int d) {
    for (int i = 0; i < rows; ++i) {
        float *gi = g + (int64_t)i * d;
        const float *ui = unit + (int64_t)i * d;
        float along = 0.0f;
#pragma omp simd reduction(+ : along)
        for (int j = 0; j < d; ++j) along += ui[j] * gi[j];
        float a = norm[i] < NORM_EPS ? 0.0f : along, inv = 1.0f / denom[i];
        for (int j = 0; j < d; ++j) gi[j] = (gi[j] - ui[j] * a) * inv;
    }
}

static void column_sums(const float *x, float *out, int rows, int cols) {
    for (int j = 0; j < cols; ++j) out[j] = 0.0f;
    for (int i = 0; i < rows; ++i) {
        const float *xi = x + (int64_t)i * cols;
        for (int j = 0; j < cols; ++j) out[j] += xi[j];
    }
}

/* Momentum SGD with L1 (sign) and weight decay, as GroupSGD (d = g + l1 sign(p) + wd p;
   buf = m buf + d; p += neg_lr buf); returns sum |p| after the update. */
static float sgd(float *restrict p, const float *restrict g, float *restrict buf, int64_t n,
                 float neg_lr, float momentum, float decay, float l1) {
    float l1_norm = 0.0f;
#pragma omp simd reduction(+ : l1_norm)
    for (int64_t k = 0; k < n; ++k) {
        float pk = p[k];
        float sign = pk > 0.0f ? 1.0f : (pk < 0.0f ? -1.0f : 0.0f);
        float d = g[k] + sign * l1;
        d = d + pk * decay;
        float b = buf[k] * momentum + d;
        buf[k] = b;
        pk = pk + b * neg_lr;
        p[k] = pk;
        l1_norm += pk < 0.0f ? -pk : pk;
    }
    return l1_norm;
}

/* What the forward keeps for the backward, each [b, ...] */
typedef struct {
    float *h, *a, *u, *zhat, *z, *rstd, *q, *gate;
} Acts;

static Acts take_acts(float **cursor, int b, int d, int R, int S) {
    Acts t;
    t.h = take(cursor, (int64_t)b * R);
    t.a = take(cursor, (int64_t)b * R);
    t.u = take(cursor, (int64_t)b * d);
    t.zhat = take(cursor, (int64_t)b * d);
    t.z = take(cursor, (int64_t)b * d);
    t.rstd = take(cursor, b);
    t.q = take(cursor, (int64_t)b * S);
    t.gate = take(cursor, (int64_t)b * d);
    return t;
}

/* LuCA's output for b rows of x (method.md §3), keeping the activations in t */
static void luca_forward(sgemm_fn gemm, const float *p, const Slots *off, int flow, int b, int d,
                         int R, int S, const float *x, const Acts *t, float *out) {
    if (flow != FLOW_CALIBRATOR) {
        const float *bd = p + off->down_b, *bu = p + off->up_b;
        const float *gamma = p + off->norm_w, *beta = p + off->norm_b;
        matmul(gemm, 0, 0, b, R, d, x, d, p + off->down_w, R, 0.0f, t->h, R);
        for (int i = 0; i < b; ++i)
            for (int j = 0; j < R; ++j) {
                float v = t->h[i * R + j] + bd[j];
                t->h[i * R + j] = v;
                t->a[i * R + j] = gelu(v);
            }
        matmul(gemm, 0, 0, b, d, R, t->a, R, p + off->up_w, d, 0.0f, t->u, d);
        for (int i = 0; i < b; ++i) {
            float *ui = t->u + (int64_t)i * d, *zh = t->zhat + (int64_t)i * d, *zi = t->z + (int64_t)i * d;
            const float *xi = x + (int64_t)i * d;
            if (flow == FLOW_TOSCA)
                for (int j = 0; j < d; ++j) ui[j] = ui[j] + bu[j] + xi[j];
            else
                for (int j = 0; j < d; ++j) ui[j] = ui[j] + bu[j];
            float s1 = 0.0f;
#pragma omp simd reduction(+ : s1)
            for (int j = 0; j < d; ++j) s1 += ui[j];
            float m = s1 / (float)d, s2 = 0.0f;
#pragma omp simd reduction(+ : s2)
            for (int j = 0; j < d; ++j) s2 += (ui[j] - m) * (ui[j] - m);
            float rs = 1.0f / sqrtf(s2 / (float)d + LN_EPS);
            t->rstd[i] = rs;
            for (int j = 0; j < d; ++j) {
                float v = (ui[j] - m) * rs;
                zh[j] = v;
                zi[j] = v * gamma[j] + beta[j];
            }
        }
    }
    const float *v_in = flow == FLOW_TOSCA ? t->z : x; /* the calibrator's input */
    if (flow != FLOW_ADAPTER) {
        matmul(gemm, 0, 0, b, S, d, v_in, d, p + off->cal_down_w, S, 0.0f, t->q, S);
        for (int64_t k = 0; k < (int64_t)b * S; ++k) t->q[k] = t->q[k] > 0.0f ? t->q[k] : 0.0f;
        matmul(gemm, 0, 0, b, d, S, t->q, S, p + off->cal_up_w, d, 0.0f, t->gate, d);
#pragma omp simd
        for (int64_t k = 0; k < (int64_t)b * d; ++k) t->gate[k] = sigmoid(t->gate[k]);
    }
    const int64_t bd_n = (int64_t)b * d;
    if (flow == FLOW_TOSCA)
        for (int64_t k = 0; k < bd_n; ++k) out[k] = t->z[k] * t->gate[k];
    else if (flow == FLOW_TOSCA_R)
        for (int64_t k = 0; k < bd_n; ++k) out[k] = t->z[k] + x[k] * t->gate[k];
    else if (flow == FLOW_ADAPTER)
        memcpy(out, t->z, sizeof(float) * bd_n);
    else
        for (int64_t k = 0; k < bd_n; ++k) out[k] = x[k] * t->gate[k];
}

static void step_one(const StepArgs *A, int64_t g) {
    const int b = (int)A->batch, d = (int)A->dim, R = (int)A->r, S = (int)A->s, C = (int)A->classes;
    const int flow = (int)A->flow;
    const int64_t P = A->param_size;
    const sgemm_fn gemm = A->gemm;
    float *p = A->flat + g * P, *gp = A->grad_flat + g * P;
    float *W = A->weight + g * (int64_t)C * d, *gW = A->grad_weight + g * (int64_t)C * d;
    const float sig = A->sigma[g];
    const int has_adapter = flow != FLOW_CALIBRATOR, has_calibrator = flow != FLOW_ADAPTER;

    float *cursor = A->work;
    float *x = take(&cursor, (int64_t)b * d);
    int64_t *y = (int64_t *)take(&cursor, 2 * (int64_t)b);
    const Acts t = take_acts(&cursor, b, d, R, S);
    float *h = t.h, *a = t.a, *zhat = t.zhat, *z = t.z, *rstd = t.rstd, *q = t.q, *gate = t.gate;
    float *out = take(&cursor, (int64_t)b * d), *unit = take(&cursor, (int64_t)b * d);
    float *norm = take(&cursor, b), *denom = take(&cursor, b);
    float *w_unit = take(&cursor, (int64_t)C * d), *w_norm = take(&cursor, C), *w_denom = take(&cursor, C);
    float *cosv = take(&cursor, (int64_t)b * C), *dlog = take(&cursor, (int64_t)b * C);
    float *d_out = take(&cursor, (int64_t)b * d), *d_c2 = take(&cursor, (int64_t)b * d);
    float *d_c1 = take(&cursor, (int64_t)b * S), *d_h = take(&cursor, (int64_t)b * R);

    /* ---- the batch */
    const int64_t *rows = A->index + g * A->index_stride;
    for (int i = 0; i < b; ++i) {
        memcpy(x + (int64_t)i * d, A->features + rows[i] * d, sizeof(float) * d);
        y[i] = A->targets[rows[i]];
    }

    /* ---- forward */
    luca_forward(gemm, p, &A->off, flow, b, d, R, S, x, &t, out);
    const float *v_in = flow == FLOW_TOSCA ? z : x; /* the calibrator's input */
    normalize_rows(out, unit, norm, denom, b, d);
    normalize_rows(W, w_unit, w_norm, w_denom, C, d);
    matmul(gemm, 0, 1, b, C, d, unit, d, w_unit, d, 0.0f, cosv, C);

    /* ---- cross-entropy (mean over the batch) and its gradient */
    double loss = 0.0, d_sigma = 0.0;
    int64_t hits = 0;
    const float inv_b = 1.0f / (float)b;
    for (int i = 0; i < b; ++i) {
        const float *ci = cosv + (int64_t)i * C;
        float *di = dlog + (int64_t)i * C;
        float top = -INFINITY;
        int best = 0;
        for (int c = 0; c < C; ++c) {
            float l = ci[c] * sig;
            di[c] = l;
            if (l > top) top = l, best = c; /* the first largest, as argmax */
        }
        float total = 0.0f;
        for (int c = 0; c < C; ++c) total += fast_exp(di[c] - top);
        float lse = top + logf(total);
        loss -= di[y[i]] - lse;
        hits += best == y[i];
        for (int c = 0; c < C; ++c) di[c] = fast_exp(di[c] - lse) * inv_b;
        di[y[i]] += -inv_b;
        for (int c = 0; c < C; ++c) {
            d_sigma += (double)di[c] * ci[c];
            di[c] *= sig;
        }
    }
    loss /= b;
    A->grad_sigma[g] = (float)d_sigma;

    /* ---- classifier rows, and the gradient reaching the module output */
    matmul(gemm, 1, 0, C, d, b, dlog, C, unit, d, 0.0f, gW, d);
    normalize_backward(gW, w_unit, w_norm, w_denom, C, d);
    matmul(gemm, 0, 0, b, d, C, dlog, C, w_unit, d, 0.0f, d_out, d);
    normalize_backward(d_out, unit, norm, denom, b, d);

    /* ---- calibrator */
    if (has_calibrator) {
        const float *mult = flow == FLOW_TOSCA ? z : x;
        for (int64_t k = 0; k < (int64_t)b * d; ++k)
            d_c2[k] = d_out[k] * mult[k] * (1.0f - gate[k]) * gate[k];
        matmul(gemm, 1, 0, S, d, b, q, S, d_c2, d, 0.0f, gp + A->off.cal_up_w, d);
        matmul(gemm, 0, 1, b, S, d, d_c2, d, p + A->off.cal_up_w, d, 0.0f, d_c1, S);
        for (int64_t k = 0; k < (int64_t)b * S; ++k) d_c1[k] = q[k] > 0.0f ? d_c1[k] : 0.0f;
        matmul(gemm, 1, 0, d, S, b, v_in, d, d_c1, S, 0.0f, gp + A->off.cal_down_w, S);
    }

    /* ---- adapter and LayerNorm */
    if (has_adapter) {
        float *d_z = d_out; /* tosca_r, adapter: out = ... + LN(A(x)) */
        if (flow == FLOW_TOSCA) {
            for (int64_t k = 0; k < (int64_t)b * d; ++k) d_z[k] = d_out[k] * gate[k];
            matmul(gemm, 0, 1, b, d, S, d_c1, S, p + A->off.cal_down_w, S, 1.0f, d_z, d);
        }
        const float *gamma = p + A->off.norm_w;
        float *g_gamma = gp + A->off.norm_w, *g_beta = gp + A->off.norm_b;
        for (int j = 0; j < d; ++j) g_gamma[j] = g_beta[j] = 0.0f;
        float *d_u = d_c2; /* free now */
        for (int i = 0; i < b; ++i) {
            const float *dz = d_z + (int64_t)i * d, *zh = zhat + (int64_t)i * d;
            float *du = d_u + (int64_t)i * d;
            float sg = 0.0f, sgz = 0.0f;
#pragma omp simd reduction(+ : sg, sgz)
            for (int j = 0; j < d; ++j) {
                g_gamma[j] += dz[j] * zh[j];
                g_beta[j] += dz[j];
                float gj = dz[j] * gamma[j];
                du[j] = gj;
                sg += gj;
                sgz += gj * zh[j];
            }
            float mg = sg / (float)d, mgz = sgz / (float)d, rs = rstd[i];
            for (int j = 0; j < d; ++j) du[j] = (du[j] - mg - zh[j] * mgz) * rs;
        }
        column_sums(d_u, gp + A->off.up_b, b, d);
        matmul(gemm, 1, 0, R, d, b, a, R, d_u, d, 0.0f, gp + A->off.up_w, d);
        matmul(gemm, 0, 1, b, R, d, d_u, d, p + A->off.up_w, d, 0.0f, d_h, R);
        for (int64_t k = 0; k < (int64_t)b * R; ++k) d_h[k] *= gelu_grad(h[k]);
        column_sums(d_h, gp + A->off.down_b, b, R);
        matmul(gemm, 1, 0, d, R, b, x, d, d_h, R, 0.0f, gp + A->off.down_w, R);
    }

    /* ---- the update */
    const float lr = A->neg_lr[g], m = A->momentum[g], wd = A->decay[g], l1 = A->l1[g];
    float l1_norm = sgd(p, gp, A->buf_flat + g * P, P, lr, m, wd, l1);
    sgd(W, gW, A->buf_weight + g * (int64_t)C * d, (int64_t)C * d, lr, m, wd, 0.0f);
    sgd(A->sigma + g, A->grad_sigma + g, A->buf_sigma + g, 1, lr, m, wd, 0.0f);
    A->epoch_loss[g] += loss;
    if (A->track) {
        A->loss_sum[g] += (loss + (double)l1 * l1_norm) * b;
        A->correct[g] += hits;
    }
}

/* One step of every configuration (each its own batch rows, parameters and hyper-parameters). */
void tosca_step(const StepArgs *args) {
    for (int64_t g = 0; g < args->groups; ++g) step_one(args, g);
}

#define FORWARD_BLOCK 64 /* rows per pass: the block's activations stay in cache */

int64_t tosca_forward_workspace_floats(int64_t dim, int64_t r, int64_t s) {
    const int64_t b = FORWARD_BLOCK;
    return b * (5 * dim + 2 * r + s + 4) + 16 * 12;
}

/* Every configuration's LuCA output (or unit output) on the same rows of x. */
void tosca_forward(const ForwardArgs *A) {
    const int d = (int)A->dim, R = (int)A->r, S = (int)A->s, flow = (int)A->flow;
    for (int64_t g = 0; g < A->groups; ++g) {
        const float *p = A->params + g * A->param_size;
        for (int64_t lo = 0; lo < A->rows; lo += FORWARD_BLOCK) {
            const int b = (int)(A->rows - lo < FORWARD_BLOCK ? A->rows - lo : FORWARD_BLOCK);
            float *cursor = A->work;
            const Acts t = take_acts(&cursor, b, d, R, S);
            float *norm = take(&cursor, b), *denom = take(&cursor, b);
            float *out = A->out + (g * A->rows + lo) * d;
            luca_forward(A->gemm, p, &A->off, flow, b, d, R, S, A->x + lo * d, &t, out);
            if (A->normalize) normalize_rows(out, out, norm, denom, b, d);
        }
    }
}
