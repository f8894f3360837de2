//! "Did you mean" suggestions for unknown names in configuration errors.

/// The candidate closest to `word`, if it is close enough to be a typo:
/// a Jaro-Winkler similarity of at least 0.8, or one edit away.
pub(crate) fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_lowercase();
    candidates
        .into_iter()
        .map(|candidate| (candidate, strsim::jaro_winkler(&word, candidate)))
        .filter(|&(candidate, score)| score >= 0.8 || strsim::levenshtein(&word, candidate) <= 1)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(candidate, _)| candidate)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn suggests_near_misses_only() {
        let words = ["single_rank", "all_ranks", "sampled", "first_rank_per_node"];
        assert_eq!(closest("singel_rank", words), Some("single_rank"));
        assert_eq!(closest("ALL_RANK", words), Some("all_ranks"));
        assert_eq!(closest("zzz", words), None);
    }
}
