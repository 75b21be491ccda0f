//! "Did you mean …?": the nearest of a set of known names to a misspelt one. One definition for
//! every message that offers one (environment variables, commands, case names, labels).

/// Edit distance between two byte strings: insertions, deletions, substitutions and swaps of
/// two neighbours (`rnu` → `run` is 1), each counting 1 (the optimal string alignment
/// distance).
pub fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    // `cur[j]` = distance between the first `i + 1` bytes of `a` and the first `j` bytes of
    // `b`; `prev` and `prev2` are the rows for `i` and `i - 1` bytes.
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 0..a.len() {
        cur[0] = i + 1;
        for j in 0..b.len() {
            let substitute = prev[j] + usize::from(a[i] != b[j]);
            let mut best = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                best = best.min(prev2[j - 1] + 1);
            }
            cur[j + 1] = best;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The known name nearest to `word`, when it is near enough to be a likely typo: at most a
/// third of the longer name's length away (and at least 1 edit allowed; 2 for names of six
/// characters or more). Ties go to the first in `known`.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (edit_distance(word.as_bytes(), k.as_bytes()), k))
        .filter(|&(d, k)| d <= (word.len().max(k.len()) / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// ` (did you mean X?)` for the [`closest`] known name, or nothing.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, known).map_or_else(String::new, |k| format!(" (did you mean {k}?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance(b"", b""), 0);
        assert_eq!(edit_distance(b"abc", b""), 3);
        assert_eq!(edit_distance(b"", b"abc"), 3);
        assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
        assert_eq!(edit_distance(b"HEEP", b"HEAP"), 1);
        assert_eq!(edit_distance(b"rnu", b"run"), 1);
        assert_eq!(edit_distance(b"ca", b"abc"), 3);
    }

    #[test]
    fn closest_offers_near_names_only() {
        let known = ["run", "tune", "advise", "serve"];
        assert_eq!(closest("rn", known), Some("run"));
        assert_eq!(closest("tunee", known), Some("tune"));
        assert_eq!(closest("advice", known), Some("advise"));
        assert_eq!(closest("xyz", known), None);
        assert_eq!(
            closest("three_sizing", ["three_sizings", "defaults"]),
            Some("three_sizings")
        );
        assert_eq!(did_you_mean("rnu", known), " (did you mean run?)");
        assert_eq!(did_you_mean("zzzzzz", known), "");
    }
}
