//! Line charts as SVG and PNG (plotters): title, labelled axes with units, a legend, one
//! line with markers per series. PNG text is drawn with the bundled DejaVu Sans
//! (`assets/`, Bitstream Vera / DejaVu licence) through ab_glyph, so no system font is needed.

use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// One chart.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// `(name, points)`; points are drawn in x order.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Log-scale x axis (for latency CDFs over decades).
    pub log_x: bool,
    /// Vertical lines at x values, each with a legend entry (a fault's time and name).
    pub marks: Vec<(f64, String)>,
}

const FONT: &str = "sans-serif";
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        plotters::style::register_font(
            FONT,
            FontStyle::Normal,
            include_bytes!("../assets/DejaVuSans.ttf"),
        )
        .unwrap_or_else(|_| panic!("the bundled DejaVu Sans is a valid font"));
    });
}

const SIZE: (u32, u32) = (960, 600);

/// Distinguishable line colours (the "tab10" palette), readable on white.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Writes `<stem>.svg` and `<stem>.png`; returns their paths.
pub fn write(chart: &Chart, stem: &Path) -> Result<Vec<PathBuf>, String> {
    register_font();
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    draw(chart, SVGBackend::new(&svg, SIZE).into_drawing_area())
        .map_err(|e| format!("{}: {e}", svg.display()))?;
    draw(chart, BitMapBackend::new(&png, SIZE).into_drawing_area())
        .map_err(|e| format!("{}: {e}", png.display()))?;
    Ok(vec![svg, png])
}

/// The axis range of `values`, padded so points do not sit on the frame; a y axis of
/// non-negative values starts at 0 (`from_zero`) so heights compare honestly.
fn range(values: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        return (lo / 1.2, hi * 1.2);
    }
    if hi - lo < 1e-12 {
        lo -= 1.0_f64.max(lo.abs() * 0.1);
        hi += 1.0_f64.max(hi.abs() * 0.1);
    }
    let pad = (hi - lo) * 0.05;
    if from_zero && lo >= 0.0 {
        return (0.0, hi + pad);
    }
    (lo - pad, hi + pad)
}

/// The title's font size: 24 px, smaller for long titles so they fit the 960 px width.
fn title_size(title: &str) -> u32 {
    let chars = title.chars().count() as u32;
    if chars <= 72 {
        24
    } else {
        (24 * 72 / chars).max(13)
    }
}

/// Where the legend hides the fewest points: the corners first, then the middles of the
/// edges and the centre. The legend's box is estimated from its entries (DejaVu at 15 px,
/// about 9 px per character and 22 px per line) against the plot area.
fn legend_corner(chart: &Chart, x: (f64, f64), y: (f64, f64)) -> SeriesLabelPosition {
    use SeriesLabelPosition as P;
    let fraction = |v: f64, (lo, hi): (f64, f64), log: bool| {
        if log && v > 0.0 && lo > 0.0 {
            (v / lo).ln() / (hi / lo).ln()
        } else {
            (v - lo) / (hi - lo)
        }
    };
    let names = chart
        .series
        .iter()
        .map(|(n, _)| n)
        .chain(chart.marks.iter().map(|(_, n)| n));
    let longest = names.clone().map(|n| n.chars().count()).max().unwrap_or(0) as f64;
    let entries = names.count() as f64;
    let (plot_w, plot_h) = (f64::from(SIZE.0) - 110.0, f64::from(SIZE.1) - 110.0);
    let w = ((50.0 + 9.0 * longest) / plot_w).min(1.0);
    let h = ((14.0 + 22.0 * entries) / plot_h).min(1.0);
    // Candidate boxes as (left, bottom) in fractions of the plot area.
    let candidates = [
        (P::UpperLeft, 0.0, 1.0 - h),
        (P::UpperRight, 1.0 - w, 1.0 - h),
        (P::LowerRight, 1.0 - w, 0.0),
        (P::LowerLeft, 0.0, 0.0),
        (P::UpperMiddle, (1.0 - w) / 2.0, 1.0 - h),
        (P::MiddleRight, 1.0 - w, (1.0 - h) / 2.0),
        (P::MiddleLeft, 0.0, (1.0 - h) / 2.0),
        (P::LowerMiddle, (1.0 - w) / 2.0, 0.0),
        (P::MiddleMiddle, (1.0 - w) / 2.0, (1.0 - h) / 2.0),
    ];
    let points: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|(_, p)| p.iter())
        .map(|(px, py)| (fraction(*px, x, chart.log_x), fraction(*py, y, false)))
        .collect();
    let margin = 0.02;
    let hidden = |left: f64, bottom: f64| {
        points
            .iter()
            .filter(|(fx, fy)| {
                (left - margin..=left + w + margin).contains(fx)
                    && (bottom - margin..=bottom + h + margin).contains(fy)
            })
            .count()
    };
    candidates
        .into_iter()
        .min_by_key(|(_, left, bottom)| hidden(*left, *bottom))
        .map(|(position, _, _)| position)
        .expect("candidates")
}

/// An axis tick: whole numbers without a fraction (`16000`, not `16000.0`), others with
/// at most three significant decimals and no trailing zeros (`0.05`, `1.5`).
fn tick_label(v: f64) -> String {
    if v == v.trunc() || v.abs() >= 100.0 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn draw<DB: DrawingBackend>(
    chart: &Chart,
    root: DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let points = || chart.series.iter().flat_map(|(_, p)| p.iter());
    let marks = chart.marks.iter().map(|(x, _)| *x);
    let (x0, x1) = range(points().map(|p| p.0).chain(marks), chart.log_x, false);
    let (y0, y1) = range(points().map(|p| p.1), false, true);
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&chart.title, (FONT, title_size(&chart.title)))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    let style = |size| (FONT, size).into_font();
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .label_style(style(15))
                .axis_desc_style(style(17))
                .x_label_formatter(&|v| tick_label(*v))
                .y_label_formatter(&|v| tick_label(*v))
                .draw()
                .map_err(err)?;
            for (i, (name, pts)) in chart.series.iter().enumerate() {
                let color = COLORS[i % COLORS.len()].to_rgba();
                let mut pts = pts.clone();
                pts.retain(|p| p.0.is_finite() && p.1.is_finite() && (!chart.log_x || p.0 > 0.0));
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                ctx.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                // Dense series (timelines) read better as lines with small markers.
                let radius = if pts.len() > 40 { 2 } else { 4 };
                ctx.draw_series(pts.iter().map(|&p| Circle::new(p, radius, color.filled())))
                    .map_err(err)?;
            }
            for (x, name) in &chart.marks {
                let color = BLACK.mix(0.7);
                let line = vec![(*x, y0), (*x, y1)];
                ctx.draw_series(DashedLineSeries::new(line, 8, 6, color.stroke_width(2)))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            ctx.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(style(15))
                .position(legend_corner(chart, (x0, x1), (y0, y1)))
                .draw()
                .map_err(err)?;
        }};
    }
    if chart.log_x {
        body!(builder
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(err)?);
    } else {
        body!(builder.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_drop_empty_fractions() {
        assert_eq!(tick_label(16000.0), "16000");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(0.05), "0.05");
        assert_eq!(tick_label(1.5), "1.5");
        assert_eq!(tick_label(0.45), "0.45");
        assert_eq!(tick_label(-20.0), "-20");
        assert_eq!(tick_label(122.4), "122");
    }

    #[test]
    fn writes_a_readable_svg_and_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let chart = Chart {
            title: "p50 latency vs rate".into(),
            x_label: "rate per coordinator (txns/s)".into(),
            y_label: "p50 latency (ms)".into(),
            series: vec![
                ("tiga".into(), vec![(100.0, 130.0), (200.0, 131.0)]),
                ("2pl-2pc".into(), vec![(100.0, 250.0), (200.0, 300.0)]),
            ],
            log_x: false,
            marks: vec![(150.0, "crash:shard0/replica0@150s".into())],
        };
        let paths = write(&chart, &dir.path().join("fig")).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        for text in [
            "p50 latency vs rate",
            "rate per coordinator (txns/s)",
            "tiga",
            "2pl-2pc",
            "crash:shard0/replica0@150s",
        ] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }
        let png = std::fs::read(&paths[1]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(
            png.len() > 10_000,
            "a PNG with content: {} bytes",
            png.len()
        );
    }

    #[test]
    fn the_legend_goes_where_it_hides_no_points() {
        let line = |pts: Vec<(f64, f64)>| Chart {
            series: vec![("a".into(), pts)],
            ..Chart::default()
        };
        let rising: Vec<(f64, f64)> = (0..=10).map(|i| (f64::from(i), f64::from(i))).collect();
        assert!(matches!(
            legend_corner(&line(rising), (0.0, 10.0), (0.0, 10.0)),
            SeriesLabelPosition::UpperLeft
        ));
        let falling: Vec<(f64, f64)> = (0..=10)
            .map(|i| (f64::from(i), f64::from(10 - i)))
            .collect();
        assert!(matches!(
            legend_corner(&line(falling), (0.0, 10.0), (0.0, 10.0)),
            SeriesLabelPosition::UpperRight
        ));
    }
}
