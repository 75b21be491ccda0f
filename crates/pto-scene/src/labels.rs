//! Task labels a scene asks configs for (issue 11, item 5): one rule for label families.
//!
//! A scene declares the labels its orchestration requests with [`CaseRun::for_label`]: single
//! labels (`attn`) and families (`ew`, whose tasks are labelled `ew0`, `ew1`, …). A case's
//! `config.tasks.<key>` applies to the task labelled `L` when `key == L`, or when `key` is L's
//! family (`L` minus its trailing digits, declared as a family). Blocks layer field by field and
//! ring by ring: `tasks.ew` sizes every `ew<N>`, and `tasks.ew3` changes only what it sets for
//! `ew3` (specificity: `tasks.<member>` > `tasks.<family>` > the case's `runtime_env` >
//! `PTO2_RING_*` > default). Reports, directories and scope stats use the task's own label
//! (`ew3`).
//!
//! Two rules catch keys that size nothing: a key that can match no declared label is a load
//! error listing what the scene can request; a key that loads but that no task of the run
//! requested (say `tasks.ew9` when the case submits `ew0`..`ew7`) fails the case when it has
//! run ("declared under config.tasks but never requested by the orchestration").
//!
//! [`CaseRun::for_label`]: crate::CaseRun::for_label

/// One label a scene requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label {
    pub name: &'static str,
    /// Tasks are labelled `name<N>` (and `tasks.name` applies to all of them).
    pub family: bool,
    pub doc: &'static str,
}

impl Label {
    /// A single label.
    pub const fn one(name: &'static str, doc: &'static str) -> Label {
        Label {
            name,
            family: false,
            doc,
        }
    }

    /// A family: tasks labelled `name0`, `name1`, ….
    pub const fn family(name: &'static str, doc: &'static str) -> Label {
        Label {
            name,
            family: true,
            doc,
        }
    }

    /// `attn`, or `ew, ew<N>` for a family.
    pub fn spelling(&self) -> String {
        if self.family {
            format!("{0}, {0}<N>", self.name)
        } else {
            self.name.to_string()
        }
    }
}

/// The family of a task label: `ew3` → `ew`; `attn` (no trailing digits) or `42` → `None`.
pub fn family_of(label: &str) -> Option<&str> {
    let stem = label.trim_end_matches(|c: char| c.is_ascii_digit());
    (stem.len() < label.len() && !stem.is_empty()).then_some(stem)
}

/// The `config.tasks` keys that size the task labelled `label`, least specific first: its
/// family's key (`ew` for `ew3`), then its own (`ew3`), each only when present. Each layers
/// on the one before, field by field and ring by ring (a zero entry keeps the layer below).
pub fn applicable_keys<'k>(
    label: &str,
    keys: impl Iterator<Item = &'k String> + Clone,
) -> Vec<&'k str> {
    let find = |name: &str| keys.clone().find(|k| *k == name).map(String::as_str);
    let family = family_of(label).and_then(find);
    family.into_iter().chain(find(label)).collect()
}

/// Whether `key` (a `config.tasks` key) can apply to a task of the scene, and if not, the
/// error text naming what the scene can request.
pub fn check_key(scene: &str, key: &str, labels: &[Label]) -> Result<(), String> {
    let known = labels.iter().any(|l| {
        l.name == key || (l.family && family_of(key) == Some(l.name) && key.len() > l.name.len())
    });
    if known {
        return Ok(());
    }
    if labels.is_empty() {
        return Err(format!(
            "scene {scene} requests no task labels (use config.runtime_env for its tasks)"
        ));
    }
    let allowed: Vec<String> = labels.iter().map(Label::spelling).collect();
    // A family member's stem is matched against the family (`atn3` → `attn`).
    let word = family_of(key).unwrap_or(key);
    Err(format!(
        "scene {scene} requests no label matching this key{} (labels: {})",
        pto_types::suggest::did_you_mean(word, labels.iter().map(|l| l.name)),
        allowed.join("; ")
    ))
}

/// The `config.tasks` key that advice for runs labelled `label` is written to: the most
/// specific key the case has for it (`tasks.ew3` when present, else `tasks.ew`), or, when
/// the case has neither, the label's declared family, else the label itself. So advice is per
/// member where a member block exists and per family otherwise.
pub fn advice_key<'a>(
    label: &'a str,
    keys: impl Iterator<Item = &'a String> + Clone,
    labels: &[Label],
) -> &'a str {
    if let Some(key) = applicable_keys(label, keys).pop() {
        return key;
    }
    if labels.iter().any(|l| l.name == label) {
        return label;
    }
    match family_of(label) {
        Some(f) if labels.iter().any(|l| l.family && l.name == f) => f,
        _ => label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABELS: [Label; 2] = [Label::one("attn", "a"), Label::family("ew", "e")];

    #[test]
    fn families_strip_trailing_digits() {
        assert_eq!(family_of("ew3"), Some("ew"));
        assert_eq!(family_of("ew"), None);
        assert_eq!(family_of("42"), None);
        assert_eq!(family_of("l2_a10"), Some("l2_a"));
    }

    #[test]
    fn member_keys_layer_on_family_keys() {
        let keys = ["ew".to_string(), "ew3".to_string()];
        assert_eq!(applicable_keys("ew3", keys.iter()), ["ew", "ew3"]);
        assert_eq!(applicable_keys("ew4", keys.iter()), ["ew"]);
        assert_eq!(applicable_keys("ew", keys.iter()), ["ew"]);
        assert!(applicable_keys("attn", keys.iter()).is_empty());
        let member_only = ["ew3".to_string()];
        assert_eq!(applicable_keys("ew3", member_only.iter()), ["ew3"]);
        assert!(applicable_keys("ew4", member_only.iter()).is_empty());
    }

    #[test]
    fn keys_must_match_a_declared_label() {
        assert!(check_key("s", "attn", &LABELS).is_ok());
        assert!(check_key("s", "ew", &LABELS).is_ok());
        assert!(check_key("s", "ew12", &LABELS).is_ok());
        let e = check_key("s", "attn0", &LABELS).unwrap_err();
        assert!(e.contains("labels: attn; ew, ew<N>"), "{e}");
        let e = check_key("s", "atn", &LABELS).unwrap_err();
        assert!(e.contains("this key (did you mean attn?) (labels:"), "{e}");
        let e = check_key("s", "xyzzy", &LABELS).unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
        assert!(
            check_key("s", "x", &[])
                .unwrap_err()
                .contains("requests no task labels")
        );
    }

    #[test]
    fn advice_goes_to_the_most_specific_block() {
        let none: [String; 0] = [];
        assert_eq!(advice_key("ew5", none.iter(), &LABELS), "ew");
        assert_eq!(advice_key("attn", none.iter(), &LABELS), "attn");
        assert_eq!(advice_key("other7", none.iter(), &LABELS), "other7");
        let keys = ["ew".to_string(), "ew2".to_string()];
        assert_eq!(advice_key("ew2", keys.iter(), &LABELS), "ew2");
        assert_eq!(advice_key("ew5", keys.iter(), &LABELS), "ew");
        let member_only = ["ew2".to_string()];
        assert_eq!(advice_key("ew2", member_only.iter(), &LABELS), "ew2");
        assert_eq!(advice_key("ew5", member_only.iter(), &LABELS), "ew");
    }
}
