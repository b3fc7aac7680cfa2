"""Private ensembles from auxiliary data (Hamm, Cao & Belkin, ICML 2016).

Paper name → module:

* votes h_i(x_j), counts, majority vote v(x_j) (Alg. 1 step 1), soft labels α(x_j) (Alg. 2 step 1)
  → :mod:`mpdp.hamm2016.labels` (:func:`party_votes`, :func:`vote_counts`, :func:`majority_labels`,
  :func:`soft_labels`);
* weighted loss l^α (eq. (12)), the regularised ERM (4)/(17) and its multiclass form (ours)
  → :mod:`mpdp.hamm2016.erm` (:func:`fit_soft`, :func:`loss_alpha`, :func:`predict`);
* output perturbation with the sensitivities of Thm 1 (2/λ), Thm 3 (2/(Mλ)), the paper's Sec. 4.5 (aux factor (N+M−1)/N) and
  the multiclass bounds, and the ``avg`` baseline → :mod:`mpdp.hamm2016.mechanism` (:class:`EnsembleParams`,
  :func:`output_perturbation`, :func:`release_global`, :func:`avg_release`);
* local classifiers h_i (the paper's Sec. 3.1 and 6: L2-LR, also SVM, tree, naive Bayes) and the exact batched L2-LR of many
  tiny parties → :mod:`mpdp.hamm2016.local` (:data:`CLASSIFIERS`, :func:`fit_local`, :func:`batched_logreg`);
* the federation job without a trusted collector (secure sum of the votes, ours) → :mod:`mpdp.hamm2016.job`;
* in-process simulation of thousands of parties (the paper's Sec. 6 experiments) → :mod:`mpdp.hamm2016.simulation`.
"""
