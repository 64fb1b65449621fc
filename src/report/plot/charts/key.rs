//! What heatmaps and strips share: the diverging ratio colours, the marks' colours, the key
//! panel drawn beside the data (never on it), thinning names so they never overlap, and
//! placing point labels where no other label is.

// plotters' prelude: its drawing types and traits, used throughout (the crate's own prelude).
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::DrawResult;
use crate::record::view::chart::Mark;
use crate::verdict::Verdict;

pub(super) const KEY_WIDTH: i32 = 230;
/// The font size of names on the axes and beside points.
pub(super) const NAME_FONT: u32 = 12;

const NEUTRAL: (f64, f64, f64) = (247.0, 247.0, 247.0);
const WORSE: (f64, f64, f64) = (178.0, 24.0, 43.0);
const BETTER: (f64, f64, f64) = (33.0, 102.0, 172.0);

/// Where `ratio` sits on the diverging scale: -1 at 4x worse (0.25x) or beyond, 0 as expected,
/// +1 at 4x better. A ratio's spread is multiplicative, so the scale is logarithmic.
pub(super) fn shade(ratio: f64) -> f64 {
    if !ratio.is_finite() || ratio <= 0.0 {
        return -1.0;
    }
    (ratio.log2() / 2.0).clamp(-1.0, 1.0)
}

/// The colour of `ratio`: red below 1.0x, blue above, pale near it.
pub(super) fn ratio_color(ratio: f64) -> RGBColor {
    let s = shade(ratio);
    let end = if s < 0.0 { WORSE } else { BETTER };
    let t = s.abs();
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(
        lerp(NEUTRAL.0, end.0),
        lerp(NEUTRAL.1, end.1),
        lerp(NEUTRAL.2, end.2),
    )
}

/// Text that reads on a cell of `ratio`'s colour.
pub(super) fn ink_on(ratio: f64) -> RGBColor {
    if shade(ratio).abs() > 0.55 {
        WHITE
    } else {
        BLACK
    }
}

/// A mark's colour: a failure's outline and points, a warning's, a plain point's.
pub(super) fn mark_color(m: Mark) -> RGBColor {
    match m {
        Mark::Fail => RGBColor(200, 20, 30),
        Mark::Warn => RGBColor(235, 130, 0),
        Mark::Plain => RGBColor(31, 119, 180),
    }
}

/// A name's style: plain black, or a marked node's bold in its mark's colour.
pub(super) fn name_style(m: Mark, h: HPos, v: VPos) -> TextStyle<'static> {
    let (style, color) = match m {
        Mark::Plain => (FontStyle::Normal, BLACK),
        m => (FontStyle::Bold, mark_color(m)),
    };
    ("sans-serif", NAME_FONT, style)
        .into_font()
        .color(&color)
        .pos(Pos::new(h, v))
}

/// Plain text of `size` in `color`, anchored at its (h, v) side.
pub(super) fn anchored(size: u32, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    ("sans-serif", size)
        .into_font()
        .color(&color)
        .pos(Pos::new(h, v))
}

/// The word a mark stands for in a key when the chart gives none.
pub(super) fn mark_word(m: Mark) -> &'static str {
    match m {
        Mark::Fail => Verdict::Fail.as_str(),
        Mark::Warn => Verdict::Warn.as_str(),
        Mark::Plain => Verdict::Pass.as_str(),
    }
}

/// Which of `n` names to draw, one every `step` at least: the `keep` ones (failed nodes)
/// always, then the others in order wherever no drawn name is within `step` of them.
pub(super) fn thin(n: usize, step: usize, keep: &[usize]) -> Vec<bool> {
    let step = step.max(1);
    let mut shown = vec![false; n];
    let mut taken: Vec<usize> = keep.iter().copied().filter(|&i| i < n).collect();
    taken.sort_unstable();
    taken.dedup();
    for &i in &taken {
        shown[i] = true;
    }
    for (i, show) in shown.iter_mut().enumerate() {
        if *show {
            continue;
        }
        // The drawn names nearest below and above i.
        let at = taken.partition_point(|&t| t < i);
        let below_ok = at == 0 || i - taken[at - 1] >= step;
        let above_ok = at == taken.len() || taken[at] - i >= step;
        if below_ok && above_ok {
            *show = true;
            taken.insert(at, i);
        }
    }
    shown
}

/// How many names apart drawn names must be so that names `size` pixels long, at `pitch`
/// pixels from one to the next, do not touch.
pub(super) fn step_for(size: u32, pitch: f64) -> usize {
    if pitch <= 0.0 {
        return usize::MAX;
    }
    ((size as f64 + 4.0) / pitch).ceil().max(1.0) as usize
}

/// The pixel width of `text` in the names' font (an estimate when the backend cannot say).
pub(super) fn text_width<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size: u32,
) -> u32 {
    area.estimate_text_size(text, &("sans-serif", size).into_font().color(&BLACK))
        .map(|(w, _)| w)
        .unwrap_or((text.chars().count() as f64 * size as f64 * 0.62) as u32)
}

/// Pixel boxes for labels of the given sizes, each wanted with its left edge at a point: the
/// first place at or below the wanted one (in steps of a label's height) that overlaps no
/// label placed before it and stays within `bottom`; `None` when there is none.
/// A label wanted at a pixel (its left edge, its middle), with its size in pixels.
pub(super) type Wanted = ((i32, i32), (u32, u32));

pub(super) fn place_labels(wanted: &[Wanted], bottom: i32) -> Vec<Option<(i32, i32)>> {
    let mut placed: Vec<(i32, i32, i32, i32)> = Vec::new();
    let mut out = Vec::with_capacity(wanted.len());
    for &((x, y), (w, h)) in wanted {
        let (w, h) = (w as i32, h as i32 + 2);
        let mut top = y - h / 2;
        let spot = loop {
            if top + h > bottom {
                break None;
            }
            let clash = placed
                .iter()
                .any(|&(x0, y0, x1, y1)| x < x1 && x + w > x0 && top < y1 && top + h > y0);
            if !clash {
                break Some((x, top));
            }
            top += h;
        };
        if let Some((x, t)) = spot {
            placed.push((x, t, x + w, t + h));
        }
        out.push(spot);
    }
    out
}

/// Draws `title` at the top of `area`, centred, on as many lines as it needs at the widest
/// size that fits (a long run label never runs off the picture); returns the area below it.
pub(super) fn titled<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
) -> Result<DrawingArea<DB, Shift>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let (w, _) = area.dim_in_pixel();
    let room = w.saturating_sub(24);
    let fits =
        |size: u32, lines: &[String]| lines.iter().all(|l| text_width(area, l, size) <= room);
    let one = vec![title.to_string()];
    let (size, lines) = if fits(20, &one) {
        (20, one)
    } else {
        // Split at the em dash (what ran) first, then wrap what is still too wide.
        let mut lines: Vec<String> = title.split(" — ").map(str::to_string).collect();
        let size = 17;
        let per_char =
            (text_width(area, title, size) as f64 / title.chars().count().max(1) as f64).max(1.0);
        let chars = (room as f64 / per_char) as usize;
        lines = lines
            .iter()
            .flat_map(|l| {
                if fits(size, std::slice::from_ref(l)) {
                    vec![l.clone()]
                } else {
                    wrap(l, chars.max(10))
                }
            })
            .collect();
        (size, lines)
    };
    let line_h = size as i32 + 6;
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (w as i32 / 2, 8 + i as i32 * line_h),
            anchored(size, BLACK, HPos::Center, VPos::Top),
        ))?;
    }
    let (_, below) = area.split_vertically(12 + lines.len() as i32 * line_h);
    Ok(below)
}

/// A blank picture with `title` on top, split into the data's area and the key's panel right
/// of it.
pub(super) type Framed<DB> = (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>);

pub(super) fn framed<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
) -> Result<Framed<DB>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (w, _) = root.dim_in_pixel();
    let body = titled(root, title)?;
    Ok(body.split_horizontally(w as i32 - KEY_WIDTH))
}

/// Splits `text` into lines of at most `chars` characters at spaces.
pub(super) fn wrap(text: &str, chars: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= chars => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// What one entry of a key shows before its words.
pub(super) enum Swatch {
    /// A filled point of this colour.
    Point(RGBColor),
    /// An outlined square (a marked cell).
    Outline(RGBColor),
    /// A line (an expected level).
    Line(RGBColor),
    /// A shaded square (a band).
    Shaded(RGBColor),
}

/// Writes wrapped `lines` of text from `y` down in `area`; returns the next free y.
fn write_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    x: i32,
    mut y: i32,
    size: u32,
) -> Result<i32, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    for line in wrap(text, 30) {
        area.draw(&Text::new(line, (x, y), ("sans-serif", size).into_font()))?;
        y += size as i32 + 4;
    }
    Ok(y)
}

/// The key panel: a title, the diverging scale when `scale` (its ticks in ratios), then each
/// entry's swatch and words. Drawn in its own area, beside the data.
pub(super) fn draw_key<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    scale: bool,
    entries: &[(Swatch, String)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let x = 12;
    let mut y = write_lines(area, title, x, 24, 13)? + 6;
    if scale {
        // Top: 4x better; bottom: 4x worse; 1.0x in the middle.
        let (bar_h, bar_w) = (160, 22);
        for k in 0..bar_h {
            let s = 1.0 - 2.0 * k as f64 / (bar_h - 1) as f64;
            let c = ratio_color(2f64.powf(2.0 * s));
            area.draw(&Rectangle::new(
                [(x, y + k), (x + bar_w, y + k + 1)],
                c.filled(),
            ))?;
        }
        area.draw(&Rectangle::new(
            [(x, y), (x + bar_w, y + bar_h)],
            BLACK.mix(0.5).stroke_width(1),
        ))?;
        for (i, tick) in [
            "4x better",
            "2x",
            "1x as expected",
            "0.5x",
            "4x worse (0.25x)",
        ]
        .iter()
        .enumerate()
        {
            let ty = y + (bar_h - 1) * i as i32 / 4;
            area.draw(&PathElement::new(
                vec![(x + bar_w, ty), (x + bar_w + 5, ty)],
                BLACK.stroke_width(1),
            ))?;
            area.draw(&Text::new(
                tick.to_string(),
                (x + bar_w + 8, ty),
                anchored(12, BLACK, HPos::Left, VPos::Center),
            ))?;
        }
        y += bar_h + 18;
    }
    for (swatch, words) in entries {
        let cy = y + 7;
        match swatch {
            Swatch::Point(c) => area.draw(&Circle::new((x + 8, cy), 5, c.filled()))?,
            Swatch::Outline(c) => area.draw(&Rectangle::new(
                [(x + 1, cy - 7), (x + 15, cy + 7)],
                c.stroke_width(3),
            ))?,
            Swatch::Line(c) => area.draw(&PathElement::new(
                vec![(x, cy), (x + 16, cy)],
                c.stroke_width(2),
            ))?,
            Swatch::Shaded(c) => area.draw(&Rectangle::new(
                [(x, cy - 7), (x + 16, cy + 7)],
                c.mix(0.2).filled(),
            ))?,
        }
        let lines = wrap(words, 26);
        for (i, line) in lines.iter().enumerate() {
            area.draw(&Text::new(
                line.clone(),
                (x + 24, y + 16 * i as i32),
                ("sans-serif", 13).into_font(),
            ))?;
        }
        y += 16 * lines.len().max(1) as i32 + 8;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinned_names_keep_the_marked_ones_and_are_never_closer_than_a_step() {
        for (n, step, keep) in [
            (64, 3, vec![5usize, 6, 40]),
            (200, 7, vec![0, 199, 100]),
            (10, 1, vec![]),
            (5, 50, vec![4]),
        ] {
            let shown = thin(n, step, &keep);
            let idx: Vec<usize> = (0..n).filter(|&i| shown[i]).collect();
            for k in &keep {
                assert!(shown[*k], "{k} kept");
            }
            for w in idx.windows(2) {
                // Only two kept names may sit closer than a step.
                if !(keep.contains(&w[0]) && keep.contains(&w[1])) {
                    assert!(w[1] - w[0] >= step, "{n} {step} {idx:?}");
                }
            }
            assert!(!idx.is_empty());
        }
        // Room for every name: all drawn.
        assert!(thin(12, 1, &[]).iter().all(|&s| s));
    }

    #[test]
    fn placed_labels_never_overlap() {
        // Twenty labels all wanted at the same spot: stacked, none on another.
        let wanted = vec![((100, 50), (80u32, 12u32)); 20];
        let got = place_labels(&wanted, 1000);
        let boxes: Vec<(i32, i32)> = got.iter().map(|p| p.unwrap()).collect();
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                assert!((a.1 - b.1).abs() >= 14, "{a:?} {b:?}");
            }
        }
        // No room left: the rest are not drawn rather than drawn on top.
        let got = place_labels(&wanted, 100);
        assert!(got.iter().any(Option::is_none));
    }

    #[test]
    fn the_scale_is_pale_at_one_red_below_and_blue_above() {
        let pale = ratio_color(1.0);
        assert!(pale.0 > 240 && pale.1 > 240 && pale.2 > 240);
        let slow = ratio_color(0.1);
        assert!(slow.0 > 150 && slow.1 < 60, "{slow:?}");
        let fast = ratio_color(8.0);
        assert!(fast.2 > 150 && fast.0 < 60, "{fast:?}");
        assert_eq!(shade(0.0), -1.0);
        assert_eq!(shade(f64::NAN), -1.0);
    }
}
