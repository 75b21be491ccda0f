//! The classification against brute-force byte sets: sound for every pair of views, and equal
//! to the truth for every pair in the classes the module doc calls exact, with those classes
//! decided here independently of the implementation (by enumeration where possible).

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

/// A view as a caller gives it: element size, byte offset, shape, strides in elements.
#[derive(Clone, Debug)]
struct View {
    elem: u64,
    offset: u64,
    shape: Vec<u32>,
    strides: Vec<u64>,
}

impl View {
    fn geometry(&self) -> Geometry {
        Geometry::new(self.elem, self.offset, &self.shape, &self.strides).expect("small view")
    }

    /// Every byte, by enumeration of every index.
    fn bytes(&self) -> BTreeSet<u64> {
        let mut set = BTreeSet::new();
        if self.shape.contains(&0) {
            return set;
        }
        let mut idx = vec![0u32; self.shape.len()];
        loop {
            let first: u64 = self.offset
                + idx
                    .iter()
                    .zip(&self.strides)
                    .map(|(&c, &s)| u64::from(c) * s * self.elem)
                    .sum::<u64>();
            set.extend(first..first + self.elem);
            let mut d = idx.len();
            loop {
                if d == 0 {
                    return set;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }

    /// Ordered (module doc), from the raw axes: sorted by byte stride, every stride exceeds
    /// the extent of the axes inside it.
    fn ordered(&self) -> bool {
        let mut axes: Vec<(u64, u64)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(&n, &s)| (u64::from(n), s * self.elem))
            .filter(|&(n, s)| n > 1 && s > 0)
            .collect();
        if self.elem > 1 {
            axes.push((self.elem, 1));
        }
        axes.sort_by_key(|a| std::cmp::Reverse(a.1));
        let mut inner = 0;
        for &(n, s) in axes.iter().rev() {
            if s <= inner {
                return false;
            }
            inner += (n - 1) * s;
        }
        !self.shape.contains(&0)
    }
}

/// The bytes of canonical axes from `start`.
fn bytes_of_axes(start: u64, axes: &[(u64, u64)]) -> BTreeSet<u64> {
    let mut set = BTreeSet::from([start]);
    for &(n, s) in axes {
        set = set
            .iter()
            .flat_map(|&x| (0..n).map(move |c| x + c * s))
            .collect();
    }
    set
}

fn truth(a: &BTreeSet<u64>, b: &BTreeSet<u64>) -> Overlap {
    if a.is_disjoint(b) {
        Overlap::NoOverlap
    } else if b.is_subset(a) {
        Overlap::Covered
    } else {
        Overlap::Other
    }
}

/// Dense: the bytes fill their span.
fn dense(set: &BTreeSet<u64>) -> bool {
    match (set.first(), set.last()) {
        (Some(&lo), Some(&hi)) => set.len() as u64 == hi - lo + 1,
        _ => false,
    }
}

/// Whether a byte set is a box of `radix` (levels largest first, ending with 1): the product
/// of its digit ranges has exactly as many tuples as the set has bytes (it holds the set, and
/// distinct bytes have distinct digits).
fn is_box(set: &BTreeSet<u64>, radix: &[u64]) -> bool {
    let mut ranges = vec![(u64::MAX, 0u64); radix.len()];
    for &x in set {
        let mut rest = x;
        for (j, &level) in radix.iter().enumerate() {
            let digit = rest / level;
            rest %= level;
            ranges[j] = (ranges[j].0.min(digit), ranges[j].1.max(digit));
        }
    }
    let tuples: u64 = ranges.iter().map(|&(lo, hi)| hi - lo + 1).product();
    tuples == set.len() as u64
}

/// The radix of class 4: both forms' strides and 1, largest first, if each divides the one
/// before.
fn common_radix(a: &Geometry, b: &Geometry) -> Option<Vec<u64>> {
    let mut levels: Vec<u64> = a.axes().chain(b.axes()).map(|(_, s)| s).collect();
    levels.push(1);
    levels.sort_unstable_by(|x, y| y.cmp(x));
    levels.dedup();
    levels
        .windows(2)
        .all(|w| w[0] % w[1] == 0)
        .then_some(levels)
}

/// The class of the module doc that makes the pair exact, if any.
fn exact_class(a: &View, b: &View, sa: &BTreeSet<u64>, sb: &BTreeSet<u64>) -> Option<u8> {
    let (ga, gb) = (a.geometry(), b.geometry());
    if sa.is_empty() || sb.is_empty() || sa.last() < sb.first() || sb.last() < sa.first() {
        return Some(1);
    }
    if ga.axes().eq(gb.axes()) && ga.span() == gb.span() {
        return Some(2);
    }
    let (oa, ob) = (a.ordered(), b.ordered());
    if oa && ob && (dense(sa) || dense(sb)) {
        return Some(3);
    }
    let radix = common_radix(&ga, &gb)?;
    (oa && ob && is_box(sa, &radix) && is_box(sb, &radix)).then_some(4)
}

#[track_caller]
fn check_pair(a: &View, b: &View) -> Result<(), TestCaseError> {
    let (sa, sb) = (a.bytes(), b.bytes());
    let got = a.geometry().classify(&b.geometry());
    match got {
        Overlap::NoOverlap => prop_assert!(sa.is_disjoint(&sb), "{a:?} vs {b:?}"),
        Overlap::Covered => prop_assert!(sb.is_subset(&sa), "{a:?} vs {b:?}"),
        Overlap::Other => {}
    }
    let want = truth(&sa, &sb);
    if let Some(class) = exact_class(a, b, &sa, &sb) {
        prop_assert_eq!(got, want, "class {}: {:?} vs {:?}", class, a, b);
    }
    if a.ordered() && dense(&sa) && want == Overlap::Covered {
        prop_assert_eq!(
            got,
            Overlap::Covered,
            "contiguous cover: {:?} vs {:?}",
            a,
            b
        );
    }
    Ok(())
}

fn elem() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![1u64, 2, 4, 8])
}

/// Any small view: strides 1–12 (padded, overlapping, transposed, aliasing), shapes with 1s,
/// byte offsets not necessarily aligned.
fn free_view() -> impl Strategy<Value = View> {
    let axes = prop::collection::vec((1u32..=4, 1u64..=12), 1..=4);
    (elem(), 0u64..=96, axes).prop_map(|(elem, offset, axes)| View {
        elem,
        offset,
        shape: axes.iter().map(|a| a.0).collect(),
        strides: axes.iter().map(|a| a.1).collect(),
    })
}

/// Strides that are powers of two: with any dtype sizes, every pair has a common radix, and
/// whether each view is a box depends on its offset and extents.
fn pow2_view() -> impl Strategy<Value = View> {
    let stride = prop::sample::select(vec![1u64, 2, 4, 8, 16]);
    let axes = prop::collection::vec((1u32..=4, stride), 1..=4);
    (elem(), 0u64..=64, axes).prop_map(|(elem, k, axes)| View {
        elem,
        offset: k * elem,
        shape: axes.iter().map(|a| a.0).collect(),
        strides: axes.iter().map(|a| a.1).collect(),
    })
}

/// A sub-box `(offsets, lengths)` of an array of `dims`.
fn sub_box(dims: &[u32]) -> impl Strategy<Value = Vec<(u32, u32)>> + use<> {
    dims.iter()
        .map(|&d| (0..d).prop_flat_map(move |o| (Just(o), 1..=d - o)))
        .collect::<Vec<_>>()
}

/// Two sub-boxes of one row-major array of `elem`-byte elements, each with its axes in a
/// random order (transposed views).
fn array_pair() -> impl Strategy<Value = (View, View)> {
    (elem(), prop::collection::vec(1u32..=4, 1..=4)).prop_flat_map(|(elem, dims)| {
        let rank = dims.len();
        let perm = Just((0..rank).collect::<Vec<usize>>()).prop_shuffle();
        (
            sub_box(&dims),
            perm.clone(),
            sub_box(&dims),
            perm,
            Just((elem, dims)),
        )
            .prop_map(|(ba, pa, bb, pb, (elem, dims))| {
                (
                    array_view(elem, &dims, &ba, &pa),
                    array_view(elem, &dims, &bb, &pb),
                )
            })
    })
}

fn array_view(elem: u64, dims: &[u32], sub: &[(u32, u32)], perm: &[usize]) -> View {
    let mut strides = vec![1u64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * u64::from(dims[i + 1]);
    }
    let first: u64 = sub
        .iter()
        .zip(&strides)
        .map(|(&(o, _), &s)| u64::from(o) * s)
        .sum();
    View {
        elem,
        offset: first * elem,
        shape: perm.iter().map(|&i| sub[i].1).collect(),
        strides: perm.iter().map(|&i| strides[i]).collect(),
    }
}

/// A contiguous run of bytes, any dtype.
fn contiguous_view() -> impl Strategy<Value = View> {
    (elem(), 0u64..=64, 1u32..=48).prop_map(|(elem, k, n)| View {
        elem,
        offset: k * elem,
        shape: vec![n],
        strides: vec![1],
    })
}

/// Views with empty axes, single indices and broadcasts (stride 0), which only the shortcut's
/// checks and [`Geometry::new`]'s treat specially.
fn degenerate_view() -> impl Strategy<Value = View> {
    (
        elem(),
        0u64..=64,
        prop::collection::vec((0u32..=4, 0u64..=12), 1..=4),
    )
        .prop_map(|(elem, offset, axes)| View {
            elem,
            offset,
            shape: axes.iter().map(|a| a.0).collect(),
            strides: axes.iter().map(|a| a.1).collect(),
        })
}

fn any_view() -> impl Strategy<Value = View> {
    prop_oneof![free_view(), pow2_view(), contiguous_view()]
}

/// [`Geometry::new`] (with its shortcut for runs) against the general algorithm alone, and
/// [`Geometry::of_valid`] against [`Geometry::new`].
fn check_shortcut(v: &View) -> Result<(), TestCaseError> {
    let g = v.geometry();
    let valid = Geometry::of_valid(v.elem, v.offset, &v.shape, &v.strides);
    prop_assert_eq!((valid, valid.ordered), (g, g.ordered));
    prop_assert_eq!((valid.sizes, valid.strides), (g.sizes, g.strides));
    if v.shape.contains(&0) {
        prop_assert_eq!(g, Geometry::EMPTY);
        return Ok(());
    }
    let general = Geometry::strided(v.elem, v.offset, &v.shape, &v.strides).expect("small view");
    prop_assert_eq!(g, general);
    prop_assert_eq!(g.ordered, general.ordered);
    prop_assert_eq!((g.sizes, g.strides), (general.sizes, general.strides));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The canonical form describes exactly the view's bytes, is sorted and merged, and its
    /// ordered / contiguous flags agree with their definitions.
    #[test]
    fn canonical_form_is_the_byte_set(v in any_view()) {
        let g = v.geometry();
        let set = v.bytes();
        let axes: Vec<(u64, u64)> = g.axes().collect();
        prop_assert_eq!(bytes_of_axes(g.span().start, &axes), set.clone());
        prop_assert_eq!(g.span(), *set.first().unwrap()..set.last().unwrap() + 1);
        for w in axes.windows(2) {
            prop_assert!(w[0].1 >= w[1].1 && w[0].1 != w[1].0 * w[1].1, "{:?}", axes);
        }
        prop_assert!(axes.iter().all(|&(n, s)| n >= 2 && s >= 1));
        prop_assert_eq!(g.is_ordered(), v.ordered());
        prop_assert_eq!(g.is_contiguous(), v.ordered() && dense(&set));
        if g.is_ordered() {
            for x in g.span().start.saturating_sub(2)..g.span().end + 2 {
                let below = set.range(..x).count() as u64;
                prop_assert_eq!(g.bytes_below(x), below, "x = {}", x);
            }
        }
    }

    /// The shortcut for runs gives the general algorithm's form, field for field.
    #[test]
    fn the_dense_shortcut_is_the_general_form(v in any_view()) {
        check_shortcut(&v)?;
    }

    #[test]
    fn the_dense_shortcut_is_the_general_form_of_degenerate_views(v in degenerate_view()) {
        check_shortcut(&v)?;
    }

    #[test]
    fn the_dense_shortcut_is_the_general_form_of_sub_boxes((a, b) in array_pair()) {
        check_shortcut(&a)?;
        check_shortcut(&b)?;
    }

    #[test]
    fn free_views_are_sound(a in free_view(), b in free_view()) {
        check_pair(&a, &b)?;
    }

    #[test]
    fn shares_bytes_is_the_byte_sets_meeting(a in any_view(), b in any_view()) {
        let truth = !a.bytes().is_disjoint(&b.bytes());
        let (ga, gb) = (a.geometry(), b.geometry());
        prop_assert_eq!(ga.shares_bytes(&gb, 1 << 16), Some(truth), "{:?} vs {:?}", a, b);
        prop_assert_eq!(gb.shares_bytes(&ga, 1 << 16), Some(truth), "{:?} vs {:?}", b, a);
    }

    #[test]
    fn pow2_views_are_exact_when_boxes(a in pow2_view(), b in pow2_view()) {
        check_pair(&a, &b)?;
    }

    #[test]
    fn array_boxes_are_exact((a, b) in array_pair()) {
        // Sub-boxes of one array, transposed or not, are ordered boxes of its radix.
        prop_assert!(exact_class(&a, &b, &a.bytes(), &b.bytes()).is_some(), "{:?} vs {:?}", a, b);
        check_pair(&a, &b)?;
        check_pair(&b, &a)?;
    }

    #[test]
    fn contiguous_against_any_view(a in contiguous_view(), b in any_view()) {
        check_pair(&a, &b)?;
        check_pair(&b, &a)?;
    }
}

#[test]
fn shares_bytes_decides_rows_that_straddle_the_radix() {
    // u32 rows of an 8-wide grid: [2, 4] at element 42 and [2, 2] at element 47 interleave
    // without sharing a byte; `classify` cannot tell (the second's rows cross a row boundary).
    let (writer, reader) = (
        f32_view(42, &[2, 4], &[8, 1]),
        f32_view(47, &[2, 2], &[8, 1]),
    );
    assert_eq!(writer.classify(&reader), Overlap::Other);
    assert_eq!(writer.shares_bytes(&reader, 16), Some(false));
    let touching = f32_view(45, &[2, 2], &[8, 1]);
    assert_eq!(writer.shares_bytes(&touching, 16), Some(true));
    // Past the run budget: not decided.
    assert_eq!(writer.shares_bytes(&reader, 1), None);
    // 40 rows each, more runs than the walk keeps on the stack.
    let (writer, reader) = (
        f32_view(2, &[40, 4], &[8, 1]),
        f32_view(7, &[40, 2], &[8, 1]),
    );
    assert_eq!(writer.classify(&reader), Overlap::Other);
    assert_eq!(writer.shares_bytes(&reader, 64), Some(false));
    let touching = f32_view(5, &[40, 2], &[8, 1]);
    assert_eq!(writer.shares_bytes(&touching, 64), Some(true));
}

#[track_caller]
fn check(a: &Geometry, b: &Geometry, expect: Overlap) {
    assert_eq!(a.classify(b), expect, "{a:?} vs {b:?}");
}

/// An f32 view: offset in elements, shape, strides in elements.
fn f32_view(offset: u64, shape: &[u32], strides: &[u64]) -> Geometry {
    Geometry::new(4, offset * 4, shape, strides).unwrap()
}

#[test]
fn row_and_column_halves() {
    let whole = f32_view(0, &[16, 8], &[8, 1]);
    let top = f32_view(0, &[8, 8], &[8, 1]);
    let bottom = f32_view(64, &[8, 8], &[8, 1]);
    check(&top, &bottom, Overlap::NoOverlap);
    check(&whole, &top, Overlap::Covered);
    check(&top, &whole, Overlap::Other);
    // Column halves: byte spans interleave, the boxes do not.
    let left = f32_view(0, &[4, 4], &[8, 1]);
    let right = f32_view(4, &[4, 4], &[8, 1]);
    let middle = f32_view(2, &[4, 4], &[8, 1]);
    check(&left, &right, Overlap::NoOverlap);
    check(&f32_view(0, &[4, 8], &[8, 1]), &right, Overlap::Covered);
    check(&middle, &right, Overlap::Other);
}

#[test]
fn interleaved_and_transposed_views() {
    // Even and odd elements: identical strides, origins one element apart.
    let even = f32_view(0, &[5], &[2]);
    let odd = f32_view(1, &[5], &[2]);
    check(&even, &odd, Overlap::NoOverlap);
    check(&f32_view(0, &[10], &[1]), &even, Overlap::Covered);
    // A transposed matrix touches the same bytes.
    let m = f32_view(0, &[8, 8], &[8, 1]);
    let t = f32_view(0, &[8, 8], &[1, 8]);
    assert_eq!(m, t);
    check(&t, &m, Overlap::Covered);
    // A transposed sub-box against the untransposed one.
    let block = f32_view(9, &[2, 3], &[8, 1]);
    let block_t = f32_view(9, &[3, 2], &[1, 8]);
    check(&block_t, &block, Overlap::Covered);
    check(&f32_view(10, &[3, 1], &[8, 1]), &block_t, Overlap::Other);
    check(&f32_view(8, &[3, 1], &[8, 1]), &block_t, Overlap::NoOverlap);
    check(
        &f32_view(12, &[4, 1], &[8, 1]),
        &block_t,
        Overlap::NoOverlap,
    );
}

#[test]
fn views_of_other_dtypes_compare_bytes() {
    // u8 bytes 0..4 against f32 element 1 (bytes 4..8); then element 1's first byte.
    let bytes = Geometry::new(1, 0, &[4], &[1]).unwrap();
    let elem1 = f32_view(1, &[1], &[1]);
    check(&bytes, &elem1, Overlap::NoOverlap);
    check(
        &elem1,
        &Geometry::new(1, 4, &[1], &[1]).unwrap(),
        Overlap::Covered,
    );
    // Every fourth byte of a 16-element f32 buffer: the first byte of each element.
    let firsts = Geometry::new(1, 0, &[16], &[4]).unwrap();
    check(&f32_view(0, &[16], &[1]), &firsts, Overlap::Covered);
    check(&f32_view(0, &[8], &[2]), &firsts, Overlap::Other);
    check(
        &firsts,
        &Geometry::new(1, 1, &[16], &[4]).unwrap(),
        Overlap::NoOverlap,
    );
    // An i16 column of an f32 matrix's high halves.
    let high = Geometry::new(2, 2, &[4], &[16]).unwrap();
    check(&f32_view(0, &[4, 1], &[8, 1]), &high, Overlap::Covered);
    check(&f32_view(1, &[4, 1], &[8, 1]), &high, Overlap::NoOverlap);
}

#[test]
fn rows_of_another_width_split_into_digits() {
    // Rows 0 and 2 of a 16-wide f32 matrix, against columns of the same bytes seen 8 wide.
    let rows = f32_view(0, &[2, 16], &[32, 1]);
    let column0 = f32_view(0, &[8], &[8]);
    check(&rows, &column0, Overlap::Other);
    // Rows 0..2 of 16 cover rows 0..4 of 8.
    check(
        &f32_view(0, &[2, 16], &[16, 1]),
        &f32_view(0, &[4, 8], &[8, 1]),
        Overlap::Covered,
    );
    // The right halves of 16-wide rows 0 and 2 cover column 9 of 8-wide rows 0..2 and 4..6.
    let right = f32_view(8, &[2, 8], &[32, 1]);
    check(&right, &f32_view(9, &[2], &[8]), Overlap::Other);
    check(&right, &f32_view(8, &[2, 1], &[32, 1]), Overlap::Covered);
    check(&right, &f32_view(16, &[2, 8], &[32, 1]), Overlap::NoOverlap);
}

#[test]
fn contiguous_runs_against_strided_views() {
    // A contiguous run that ends inside a row.
    let run = f32_view(8, &[4], &[1]);
    let wrap = f32_view(6, &[2, 4], &[8, 1]);
    check(&wrap, &run, Overlap::Other);
    check(&wrap, &f32_view(6, &[2], &[1]), Overlap::Covered);
    check(&wrap, &f32_view(14, &[4], &[1]), Overlap::Covered);
    check(&wrap, &f32_view(10, &[4], &[1]), Overlap::NoOverlap);
    check(&run, &wrap, Overlap::Other);
    // Rows 2..4 as a run against a column: a hit in the middle of the span.
    check(
        &f32_view(16, &[24], &[1]),
        &f32_view(3, &[8], &[8]),
        Overlap::Other,
    );
    check(
        &f32_view(12, &[3], &[1]),
        &f32_view(3, &[8], &[8]),
        Overlap::NoOverlap,
    );
}

#[test]
fn aliasing_views_are_never_dense() {
    // 8 elements over an extent of 8, but elements 3 and 4 are missing (0, 1, 2 and 5, 6, 7).
    let alias = f32_view(0, &[2, 2, 2], &[5, 1, 1]);
    assert!(!alias.is_ordered() && !alias.is_contiguous());
    check(&alias, &f32_view(3, &[1], &[1]), Overlap::Other);
    check(&alias, &f32_view(1, &[2], &[1]), Overlap::Other);
    check(&alias, &alias, Overlap::Covered);
    check(&f32_view(0, &[8], &[1]), &alias, Overlap::Covered);
}

#[test]
fn constructor_limits_and_degenerate_axes() {
    assert_eq!(Geometry::new(4, 0, &[2; 6], &[1; 6]), None);
    assert_eq!(Geometry::new(4, 0, &[2, 2], &[1]), None);
    assert_eq!(Geometry::new(0, 0, &[2], &[1]), None);
    assert_eq!(Geometry::new(8, 0, &[3], &[u64::MAX / 8]), None);
    assert_eq!(Geometry::new(1, u64::MAX, &[2], &[1]), None);
    assert_eq!(
        Geometry::new(1, u64::MAX - 1, &[1], &[1]).unwrap().span(),
        u64::MAX - 1..u64::MAX
    );
    // Empty views are all alike, and overlap nothing.
    let empty = Geometry::new(4, 1 << 60, &[3, 0], &[1, 1]).unwrap();
    assert_eq!(empty, Geometry::EMPTY);
    assert!(empty.is_empty() && !empty.is_ordered() && !empty.is_contiguous());
    check(&empty, &f32_view(0, &[4], &[1]), Overlap::NoOverlap);
    check(&f32_view(0, &[4], &[1]), &empty, Overlap::NoOverlap);
    // Axes of one index (of any stride) and broadcast axes add no byte.
    let row = f32_view(8, &[4], &[1]);
    assert_eq!(f32_view(8, &[1, 4, 3], &[100, 1, 0]), row);
    assert_eq!(f32_view(8, &[1, 4], &[u64::MAX, 1]), row);
    assert_eq!(row.axes().collect::<Vec<_>>(), [(16, 1)]);
    assert!(row.is_contiguous());
}

#[test]
fn the_bounds_rule_counts_whole_elements_and_lets_empty_views_start_anywhere() {
    // 4 f32 rows of 3, row stride 4: extent 1 + 3·4 + 2·1 = 15 elements.
    assert_eq!(element_extent(&[4, 3], &[4, 1]), 15);
    assert_eq!(check_inside(4, 0, &[4, 3], &[4, 1], 60), Ok(()));
    assert_eq!(
        check_inside(4, 1, &[4, 3], &[4, 1], 60),
        Err(OutOfBounds {
            end: 16,
            capacity: 15
        })
    );
    // A partial trailing element does not count: 63 bytes hold 15 whole f32.
    assert_eq!(
        check_inside(4, 1, &[4, 3], &[4, 1], 63),
        Err(OutOfBounds {
            end: 16,
            capacity: 15
        })
    );
    assert_eq!(check_inside(4, 1, &[4, 3], &[4, 1], 64), Ok(()));
    // Empty: no element touched, wherever it starts, even in an empty buffer.
    assert_eq!(element_extent(&[0, 3], &[4, 1]), 0);
    assert_eq!(check_inside(4, u64::MAX, &[0, 3], &[4, 1], 0), Ok(()));
}

#[test]
fn the_bounds_rule_never_overflows() {
    let shape = [u32::MAX; 5];
    let strides = [u64::MAX; 5];
    let extent = element_extent(&shape, &strides);
    assert_eq!(
        extent,
        1 + 5 * u128::from(u32::MAX - 1) * u128::from(u64::MAX)
    );
    let err = check_inside(1, u64::MAX, &shape, &strides, u64::MAX).unwrap_err();
    assert_eq!(err.end, u128::from(u64::MAX) + extent);
    assert_eq!(err.capacity, u64::MAX);
}

#[test]
fn an_empty_view_is_empty_whatever_its_offset_and_strides() {
    // The byte offset and the stride in bytes overflow; an axis of no index makes it empty.
    let far = Geometry::new(4, u64::MAX, &[0, 3], &[1, u64::MAX]);
    assert_eq!(far, Some(Geometry::EMPTY));
    assert_eq!(
        Geometry::of_valid(4, u64::MAX, &[3, 0], &[u64::MAX, 1]),
        Geometry::EMPTY
    );
    // Without the empty axis the same strides are refused.
    assert_eq!(Geometry::new(4, 0, &[2, 3], &[1, u64::MAX]), None);
    assert_eq!(Geometry::new(4, u64::MAX, &[2], &[1]), None);
}

#[test]
#[should_panic(expected = "not a valid view")]
fn of_valid_refuses_what_new_refuses() {
    let _ = Geometry::of_valid(4, 0, &[2, 3], &[1, u64::MAX]);
}
