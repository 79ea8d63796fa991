"""Reference conventions, transcribed line by line into float64 numpy from the implementations the
objectives promise to match (torch is not a dependency). Each keeps the reference's own structure
(its masks, concatenations and reductions), so an agreement is a check of the convention, not of one
formula against itself."""

import numpy as np


def _normalize(x):
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _cross_entropy(logits, labels):  # torch.nn.functional.cross_entropy, reduction="none"
    logits = np.asarray(logits, np.float64)
    m = logits.max(axis=1, keepdims=True)
    logz = np.log(np.exp(logits - m).sum(axis=1)) + m[:, 0]
    return logz - logits[np.arange(len(labels)), labels]


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def lightly_ntxent(z1, z2, temperature):
    """lightly.loss.NTXentLoss (memory_bank_size=0)."""
    a, b = _normalize(z1), _normalize(z2)
    n = len(a)
    off = ~np.eye(n, dtype=bool)
    l00, l01, l10, l11 = (x @ y.T / temperature for x, y in ((a, a), (a, b), (b, a), (b, b)))
    logits = np.concatenate([np.concatenate([l01, l00[off].reshape(n, n - 1)], axis=1),
                             np.concatenate([l10, l11[off].reshape(n, n - 1)], axis=1)])
    return _cross_entropy(logits, np.concatenate([np.arange(n)] * 2)).mean()


def st_multiple_negatives_ranking(anchors, positives, negatives, scale):
    """sentence-transformers MultipleNegativesRankingLoss: cos_sim(anchors, cat(candidates)) * scale,
    cross-entropy with labels arange(B), mean."""
    cands = positives if negatives is None else np.concatenate(
        [positives, np.asarray(negatives).reshape(-1, positives.shape[-1])])
    scores = _normalize(anchors) @ _normalize(cands).T * scale
    return _cross_entropy(scores, np.arange(len(anchors))).mean()


def openclip_clip(image, text, logit_scale):
    """open_clip.loss.ClipLoss (world_size=1)."""
    logits_per_image = logit_scale * np.asarray(image, np.float64) @ np.asarray(text, np.float64).T
    labels = np.arange(len(image))
    return (_cross_entropy(logits_per_image, labels).mean()
            + _cross_entropy(logits_per_image.T, labels).mean()) / 2


def openclip_siglip(image, text, logit_scale, logit_bias):
    """open_clip.loss.SigLipLoss (world_size=1, negative_only=False)."""
    logits = logit_scale * np.asarray(image, np.float64) @ np.asarray(text, np.float64).T + \
        logit_bias
    labels = 2 * np.eye(len(image)) - 1
    return -_log_sigmoid(labels * logits).sum() / len(image)


def hobbitlong_supcon(features, labels, temperature, base_temperature=None):
    """HobbitLong/SupContrast SupConLoss(contrast_mode='all'); features [B, V, D] pre-normalised."""
    base_temperature = temperature if base_temperature is None else base_temperature
    features = _normalize(features)
    b, v, _ = features.shape
    labels = np.asarray(labels).reshape(-1, 1)
    mask = (labels == labels.T).astype(np.float64)
    contrast_feature = np.concatenate([features[:, i] for i in range(v)], axis=0)
    anchor_feature = contrast_feature
    anchor_dot_contrast = anchor_feature @ contrast_feature.T / temperature
    logits = anchor_dot_contrast - anchor_dot_contrast.max(axis=1, keepdims=True)
    mask = np.tile(mask, (v, v))
    logits_mask = 1 - np.eye(b * v)
    mask = mask * logits_mask
    exp_logits = np.exp(logits) * logits_mask
    log_prob = logits - np.log(exp_logits.sum(1, keepdims=True))
    mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1)
    loss = -(temperature / base_temperature) * mean_log_prob_pos
    return loss.reshape(v, b).mean()


def torch_triplet_margin(anchor, positive, negative, margin, eps=1e-6):
    """torch.nn.TripletMarginLoss(margin, p=2, eps=1e-6, reduction='none'); pairwise_distance adds eps
    to the difference."""
    d_ap = np.linalg.norm(np.asarray(anchor, np.float64) - positive + eps, axis=-1)
    d_an = np.linalg.norm(np.asarray(anchor, np.float64) - negative + eps, axis=-1)
    return np.maximum(d_ap - d_an + margin, 0.0)


def st_batch_hard_triplet(embeddings, labels, margin):
    """sentence-transformers BatchHardTripletLoss with its euclidean _pairwise_distances."""
    e = np.asarray(embeddings, np.float64)
    dot = e @ e.T
    sq = np.diag(dot)
    dist = np.maximum(sq[None, :] - 2.0 * dot + sq[:, None], 0.0)
    zero = (dist == 0.0).astype(np.float64)
    dist = np.sqrt(dist + zero * 1e-16) * (1.0 - zero)
    labels = np.asarray(labels)
    eq = labels[None, :] == labels[:, None]
    mask_ap = (eq & ~np.eye(len(labels), dtype=bool)).astype(np.float64)
    hardest_pos = (mask_ap * dist).max(1, keepdims=True)
    mask_an = (~eq).astype(np.float64)
    max_an = dist.max(1, keepdims=True)
    hardest_neg = (dist + max_an * (1.0 - mask_an)).min(1, keepdims=True)
    tl = hardest_pos - hardest_neg + margin
    tl[tl < 0] = 0
    return tl.mean()


def lightly_vicreg(z_a, z_b, lambda_param, mu_param, nu_param, eps):
    """lightly.loss.VICRegLoss."""
    def variance_loss(x):
        x = x - x.mean(0)
        std = np.sqrt(x.var(0, ddof=1) + eps)
        return np.maximum(1.0 - std, 0.0).mean()

    def covariance_loss(x):
        x = x - x.mean(0)
        b, d = x.shape
        cov = np.einsum("bc,bd->cd", x, x) / (b - 1)
        return (cov[~np.eye(d, dtype=bool)] ** 2).sum() / d

    z_a, z_b = np.asarray(z_a, np.float64), np.asarray(z_b, np.float64)
    inv = ((z_a - z_b) ** 2).mean()
    var = 0.5 * (variance_loss(z_a) + variance_loss(z_b))
    cov = covariance_loss(z_a) + covariance_loss(z_b)
    return lambda_param * inv + mu_param * var + nu_param * cov


def official_barlow_twins(z1, z2, lambd):
    """facebookresearch/barlowtwins BarlowTwins.forward (one process): ``self.bn`` is
    ``nn.BatchNorm1d(affine=False)`` in training mode (biased batch variance, eps 1e-5), the
    cross-correlation is divided by the batch size, and ``off_diagonal`` takes the flattened view.
    lightly >= 1.5's ``BarlowTwinsLoss`` normalises the same way."""
    def bn(x):  # torch.nn.functional.batch_norm(training=True, eps=1e-5), no affine
        x = np.asarray(x, np.float64)
        return (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)

    def off_diagonal(x):
        n, m = x.shape
        return x.flatten()[:-1].reshape(n - 1, n + 1)[:, 1:].flatten()

    c = bn(z1).T @ bn(z2)
    c = c / len(z1)
    on_diag = ((np.diagonal(c) - 1.0) ** 2).sum()
    off_diag = (off_diagonal(c) ** 2).sum()
    return on_diag + lambd * off_diag


def mae_forward_loss(pred, target, mask, norm_pix_loss):
    """facebookresearch/mae models_mae.MaskedAutoencoderViT.forward_loss (torch var is unbiased)."""
    target = np.asarray(target, np.float64)
    if norm_pix_loss:
        mean = target.mean(-1, keepdims=True)
        var = target.var(-1, ddof=1, keepdims=True)
        target = (target - mean) / (var + 1.0e-6) ** 0.5
    loss = ((pred - target) ** 2).mean(-1)
    return (loss * mask).sum() / mask.sum()


def torch_mlm_cross_entropy(logits, labels, mask):
    """CrossEntropyLoss(ignore_index=-100) with unmasked labels set to -100 (HF BERT MLM)."""
    labels = np.where(np.asarray(mask) > 0, labels, -100).reshape(-1)
    logits = np.asarray(logits, np.float64).reshape(len(labels), -1)
    keep = labels != -100
    return _cross_entropy(logits[keep], labels[keep]).mean()


def bce_with_logits_graded(q, d, relevance, temperature):
    """torch.nn.BCEWithLogitsLoss (mean) on cos_sim(q, d) / temperature against graded targets."""
    x = _normalize(q) @ _normalize(d).T / temperature
    r = np.asarray(relevance, np.float64)
    return (np.maximum(x, 0) - x * r + np.log1p(np.exp(-np.abs(x)))).mean()


def st_margin_mse(s_pos, s_neg, t_pos, t_neg):
    """sentence-transformers MarginMSELoss: MSELoss(student_pos - student_neg, labels)."""
    return np.mean(((np.asarray(s_pos, np.float64) - s_neg) - (np.asarray(t_pos) - t_neg)) ** 2)


def st_distill_kldiv(student_scores, teacher_scores, temperature):
    """sentence-transformers DistillKLDivLoss: KLDivLoss(reduction='batchmean') * T^2."""
    s = np.asarray(student_scores, np.float64) / temperature
    t = np.asarray(teacher_scores, np.float64) / temperature
    log_q = s - np.log(np.exp(s - s.max(1, keepdims=True)).sum(1, keepdims=True)) - \
        s.max(1, keepdims=True)
    p = np.exp(t - t.max(1, keepdims=True))
    p = p / p.sum(1, keepdims=True)
    kl = np.where(p > 0, p * (np.log(p) - log_q), 0.0)  # torch kl_div: target * (log target - input)
    return kl.sum() / len(s) * temperature ** 2


def st_flops(embeddings):
    """sentence-transformers' ``FlopsLoss.compute_loss_from_embeddings`` (no threshold): the
    squared L2 norm of the batch's mean embedding."""
    return float(np.sum(np.mean(np.asarray(embeddings, np.float64), axis=0) ** 2))


def st_cosent(e1, e2, labels, scale):
    """sentence-transformers CoSENTLoss."""
    scores = (_normalize(e1) * _normalize(e2)).sum(-1) * scale
    scores = scores[:, None] - scores[None, :]
    lab = (np.asarray(labels)[:, None] < np.asarray(labels)[None, :]).astype(np.float64)
    scores = scores - (1 - lab) * 1e12
    scores = np.concatenate([np.zeros(1), scores.reshape(-1)])
    m = scores.max()
    return np.log(np.exp(scores - m).sum()) + m


def bct_cross_entropy(new_z, kernel, bias, labels):
    """Old classifier (torch Linear weight = kernel.T) on new features, cross-entropy, mean."""
    return _cross_entropy(np.asarray(new_z, np.float64) @ kernel + bias, labels).mean()


def st_matryoshka(loss_fn, args, dims, weights):
    """sentence-transformers MatryoshkaLoss (n_dims_per_step=-1): sum_i w_i * loss(truncated)."""
    return sum(w * loss_fn(*[a[..., :d] for a in args]) for d, w in zip(dims, weights))


def st_matryoshka_2d(loss_fn, layers, dims, weights, last_layer_weight, prior_layers_weight,
                     kl_div_weight, kl_temperature):
    """sentence-transformers Matryoshka2dLoss = AdaptiveLayerLoss(MatryoshkaLoss(...)) with
    n_layers_per_step = n_dims_per_step = -1 (every layer, every dim)."""
    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    loss = st_matryoshka(loss_fn, layers[-1], dims, weights) * last_layer_weight
    final = softmax(np.concatenate(layers[-1]) / kl_temperature)
    n = len(layers) - 1
    for layer_idx in range(n):
        layer_loss = st_matryoshka(loss_fn, layers[layer_idx], dims, weights)
        loss = loss + layer_loss / (1 + layer_idx) / n * prior_layers_weight
        emb = np.concatenate(layers[layer_idx]) / kl_temperature
        log_q = np.log(softmax(emb))
        kl = (final * (np.log(final) - log_q)).sum() / len(emb)
        loss = loss + kl * kl_temperature * kl_div_weight
    return loss


# --------------------------------------------------------------------------------------------------
# torchvision.transforms.functional on float CHW tensors (_functional_tensor.py), images here HWC
# --------------------------------------------------------------------------------------------------

def tv_rgb_to_grayscale(img):
    img = np.asarray(img, np.float64)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    return (0.2989 * r + 0.587 * g + 0.114 * b)[..., None]


def tv_blend(img1, img2, ratio):
    return np.clip(ratio * img1 + (1.0 - ratio) * img2, 0, 1)


def tv_adjust_brightness(img, f):
    return tv_blend(np.asarray(img, np.float64), 0.0, f)


def tv_adjust_contrast(img, f):
    return tv_blend(np.asarray(img, np.float64), tv_rgb_to_grayscale(img).mean(), f)


def tv_adjust_saturation(img, f):
    return tv_blend(np.asarray(img, np.float64), tv_rgb_to_grayscale(img), f)


def tv_adjust_hue(img, hue_factor):
    img = np.asarray(img, np.float64)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]  # _rgb2hsv
    maxc, minc = img.max(-1), img.min(-1)
    eqc = maxc == minc
    cr = maxc - minc
    ones = np.ones_like(maxc)
    s = cr / np.where(eqc, ones, maxc)
    cr_divisor = np.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / cr_divisor, (maxc - g) / cr_divisor, (maxc - b) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = np.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    h = (h + hue_factor) % 1.0
    v = maxc  # _hsv2rgb
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.astype(np.int32)
    p = np.clip(v * (1.0 - s), 0.0, 1.0)
    q = np.clip(v * (1.0 - s * f), 0.0, 1.0)
    t = np.clip(v * (1.0 - s * (1.0 - f)), 0.0, 1.0)
    i = i % 6
    mask = (i[None] == np.arange(6).reshape(-1, 1, 1)).astype(np.float64)
    a1 = np.stack((v, q, p, p, t, v))
    a2 = np.stack((t, v, v, q, p, p))
    a3 = np.stack((p, p, t, v, v, q))
    a4 = np.stack((a1, a2, a3))
    return np.einsum("ijk, xijk -> jkx", mask, a4)


def tv_gaussian_blur(img, kernel_size, sigma):
    img = np.asarray(img, np.float64)
    half = (kernel_size - 1) * 0.5
    x = np.linspace(-half, half, kernel_size)
    pdf = np.exp(-0.5 * (x / sigma) ** 2)
    k1 = pdf / pdf.sum()
    k2 = np.outer(k1, k1)
    pad = kernel_size // 2
    padded = np.pad(img, ((pad, pad), (pad, pad), (0, 0)), mode="reflect")  # torch "reflect"
    h, w, _ = img.shape
    out = np.zeros_like(img)
    for dy in range(kernel_size):  # conv2d: cross-correlation
        for dx in range(kernel_size):
            out += k2[dy, dx] * padded[dy:dy + h, dx:dx + w]
    return out


def tv_solarize(img, threshold):
    img = np.asarray(img, np.float64)
    return np.where(img >= threshold, 1.0 - img, img)


def tv_resized_crop(img, top, left, height, width, size):
    """F.crop then F.resize(size, BILINEAR, antialias=False): upsample_bilinear2d with
    align_corners=False (source index = scale * (dst + 0.5) - 0.5, clamped at 0; the next index
    clamped to the last row/column)."""
    crop = np.asarray(img, np.float64)[top:top + height, left:left + width]
    out_h, out_w = size

    def axis(out_size, in_size):
        scale = in_size / out_size
        src = np.maximum(scale * (np.arange(out_size) + 0.5) - 0.5, 0.0)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, in_size - 1)
        return i0, i1, src - i0

    y0, y1, ly = axis(out_h, height)
    x0, x1, lx = axis(out_w, width)
    ly, lx = ly[:, None, None], lx[None, :, None]
    return ((1 - ly) * ((1 - lx) * crop[y0][:, x0] + lx * crop[y0][:, x1])
            + ly * ((1 - lx) * crop[y1][:, x0] + lx * crop[y1][:, x1]))
