//! Task labels a scene asks configs for (issue 11, item 5): one rule for label families.
//!
//! A scene declares the labels its orchestration requests with [`CaseRun::for_label`]: single
//! labels (`attn`) and families (`ew`, whose tasks are labelled `ew0`, `ew1`, …). A case's
//! `config.tasks.<key>` applies to the task labelled `L` when `key == L`, or when `key` is L's
//! family (`L` minus its trailing digits, declared as a family); the more specific key wins, so
//! `tasks.ew` sizes every `ew<N>` and `tasks.ew3` only `ew3`. Reports, directories and scope
//! stats use the task's own label (`ew3`). A key that can match no declared label is a load
//! error listing what the scene can request.
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

/// The `config.tasks` key that applies to the task labelled `label`: the label itself, else
/// its family; `None` when neither is a key.
pub fn config_key<'k>(
    label: &str,
    mut keys: impl Iterator<Item = &'k String> + Clone,
) -> Option<&'k str> {
    if let Some(k) = keys.clone().find(|k| *k == label) {
        return Some(k.as_str());
    }
    let family = family_of(label)?;
    keys.find(|k| *k == family).map(String::as_str)
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
    Err(format!(
        "scene {scene} requests no label matching this key (labels: {})",
        allowed.join("; ")
    ))
}

/// The config key `label` maps to among the scene's declared labels (for grouping advice by
/// what a user writes under `config.tasks`): the label itself if declared, else its declared
/// family, else the label unchanged.
pub fn declared_key<'a>(label: &'a str, labels: &[Label]) -> &'a str {
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
    fn the_more_specific_key_wins() {
        let keys = ["ew".to_string(), "ew3".to_string()];
        assert_eq!(config_key("ew3", keys.iter()), Some("ew3"));
        assert_eq!(config_key("ew4", keys.iter()), Some("ew"));
        assert_eq!(config_key("ew", keys.iter()), Some("ew"));
        assert_eq!(config_key("attn", keys.iter()), None);
    }

    #[test]
    fn keys_must_match_a_declared_label() {
        assert!(check_key("s", "attn", &LABELS).is_ok());
        assert!(check_key("s", "ew", &LABELS).is_ok());
        assert!(check_key("s", "ew12", &LABELS).is_ok());
        let e = check_key("s", "attn0", &LABELS).unwrap_err();
        assert!(e.contains("labels: attn; ew, ew<N>"), "{e}");
        assert!(
            check_key("s", "x", &[])
                .unwrap_err()
                .contains("requests no task labels")
        );
    }

    #[test]
    fn declared_keys_group_families() {
        assert_eq!(declared_key("ew5", &LABELS), "ew");
        assert_eq!(declared_key("attn", &LABELS), "attn");
        assert_eq!(declared_key("other7", &LABELS), "other7");
    }
}
