"""The built-in baselines' light index: GENERATED from their classes by
`python -m tosca_heads.method.baseline_index_writer`; do not edit (a test fails when it is stale).
Each row: the name, where the class lives (imported on first use), the first line of its
docstring, its `reference` and its `paper`."""

from __future__ import annotations

INDEX: tuple[dict[str, str | bool], ...] = (
    {
        "name": "simplecil",
        "target": "tosca_heads.method.baseline_estimators:SimpleCIL",
        "description": "Prototype classifier: cosine similarity to each class's mean feature.",
        "reference": False,
        "paper": "Zhou, Cai, Ye & Zhan, Revisiting Class-Incremental Learning with Pre-Trained Models: Generalizability and Adaptivity are All You Need, IJCV 2024, arXiv:2303.07338",
    },
    {
        "name": "ranpac",
        "target": "tosca_heads.method.baseline_estimators:RanPAC",
        "description": "Random-projection ridge classifier: H = ReLU(x W_rand), W = (H'H + l I)^-1 H'Y over every row seen.",
        "reference": False,
        "paper": "McDonnell, Gong, Parvaneh, Abbasnejad & van den Hengel, RanPAC: Random Projections and Pre-trained Models for Continual Learning, NeurIPS 2023, arXiv:2307.02251",
    },
    {
        "name": "joint_probe",
        "target": "tosca_heads.method.baseline_estimators:JointProbe",
        "description": "Softmax regression on standardised features, full-batch L-BFGS, warm-started stage to stage.",
        "reference": "sees every task at once",
        "paper": "",
    },
    {
        "name": "ridge",
        "target": "tosca_heads.method.baselines.ridge:Ridge",
        "description": "Ridge regression on the raw features onto one-hot targets, the joint system kept across tasks in its smaller form.",
        "reference": False,
        "paper": "McDonnell et al., RanPAC, NeurIPS 2023: its row without random projection (ridge on the raw features)",
    },
    {
        "name": "slda",
        "target": "tosca_heads.method.baselines.slda:SLDA",
        "description": "Streaming LDA: running class means and one shared covariance, updated sample by sample, scored by the shrunk inverse.",
        "reference": False,
        "paper": "Hayes & Kanan, Lifelong Machine Learning with Deep Streaming Linear Discriminant Analysis, CVPR-W 2020, arXiv:1909.01520",
    },
    {
        "name": "fecam",
        "target": "tosca_heads.method.baselines.fecam:FeCAM",
        "description": "FeCAM: per-class covariances of L2-normalised features, shrunk and scaled to correlations, Mahalanobis distance.",
        "reference": False,
        "paper": "Goswami, Liu, Twardowski & van de Weijer, FeCAM: Exploiting the Heterogeneity of Class Distributions in Exemplar-Free Continual Learning, NeurIPS 2023, arXiv:2309.14062",
    },
    {
        "name": "klda",
        "target": "tosca_heads.method.baselines.klda:KLDA",
        "description": "Kernel LDA: random Fourier features of an RBF kernel, class means and one shared scatter matrix, Mahalanobis.",
        "reference": False,
        "paper": "Momeni, Mazumder & Liu, Continual Learning Using a Kernel-Based Method Over Foundation Models, AAAI 2025, arXiv:2412.15571",
    },
    {
        "name": "klda_ensemble",
        "target": "tosca_heads.method.baselines.klda:KLDAEnsemble",
        "description": "KLDA-E: five KLDA members on their own random features, their softmax probabilities averaged.",
        "reference": False,
        "paper": "Momeni, Mazumder & Liu, Continual Learning Using a Kernel-Based Method Over Foundation Models, AAAI 2025, arXiv:2412.15571",
    },
    {
        "name": "randumb",
        "target": "tosca_heads.method.baselines.randumb:RanDumb",
        "description": "RanDumb: RBF random Fourier features, then streaming LDA with OAS-shrunk class covariances.",
        "reference": False,
        "paper": "Prabhu, Sinha, Kumaraguru, Torr, Sener & Dokania, RanDumb: A Simple Approach that Questions the Efficacy of Continual Representation Learning, arXiv:2402.08823, 2024",
    },
    {
        "name": "acil",
        "target": "tosca_heads.method.baselines.acil:ACIL",
        "description": "Analytic class-incremental learning: a random ReLU buffer, then ridge regression onto one-hot targets by recursive least squares.",
        "reference": False,
        "paper": "Zhuang, Weng, Wei, Xie, Toh & Lin, ACIL: Analytic Class-Incremental Learning with Absolute Memorization and Privacy Protection, NeurIPS 2022, arXiv:2205.14922",
    },
    {
        "name": "gacl",
        "target": "tosca_heads.method.baselines.gacl:GACL",
        "description": "Generalized analytic continual learning: a random ReLU buffer, then recursive least squares onto one-hot targets of every class exposed so far.",
        "reference": False,
        "paper": "Zhuang, Chen, Fang, He, Tong, Wei, Zeng & Chen, GACL: Exemplar-Free Generalized Analytic Continual Learning, NeurIPS 2024, arXiv:2403.15706",
    },
    {
        "name": "ds_al",
        "target": "tosca_heads.method.baselines.ds_al:DSAL",
        "description": "Dual-stream analytic learning: ACIL's ReLU stream plus a tanh stream fitted to its residuals on the new classes.",
        "reference": False,
        "paper": "Zhuang, He, Tong, Zeng, Chen & Lin, DS-AL: A Dual-Stream Analytic Learning for Exemplar-Free Class-Incremental Learning, AAAI 2024, arXiv:2403.17503",
    },
    {
        "name": "loranpac",
        "target": "tosca_heads.method.baselines.loranpac:LoRanPAC",
        "description": "Random ReLU features with a continually truncated SVD and the minimum-norm least-squares classifier on it.",
        "reference": False,
        "paper": "Peng, Elenter, Agterberg, Ribeiro & Vidal, LoRanPAC: Low-rank Random Features and Pre-trained Models for Bridging Theory and Practice in Continual Learning, ICLR 2025, arXiv:2410.00645",
    },
)
