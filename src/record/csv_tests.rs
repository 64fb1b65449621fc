//! The typed CSV tables' tests: rows round-trip, bad files are named, cells that start a formula are text.
use super::*;

#[derive(Debug)]
struct T;
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct P {
    size: u64,
    label: String,
}
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct F {
    gbps: Option<f64>,
    timer: String,
}
impl CsvTable for T {
    const NAME: &'static str = "t";
    const WITH_STATS: bool = true;
    type Params = P;
    type Figures = F;
}

fn line(size: u64, label: &str, gbps: Option<f64>) -> Line<T> {
    let s = Summary::of(&[1.0, 2.0, 3.0]).unwrap();
    Line::new(
        "r1",
        format!("c{size}"),
        P {
            size,
            label: label.into(),
        },
        Some(&s),
        F {
            gbps,
            timer: "gpu".into(),
        },
    )
}

#[test]
fn header_is_leading_params_stats_figures() {
    let h = header::<T>();
    assert_eq!(
        &h[..6],
        &["schema_version", "run_id", "bench", "case", "size", "label"]
    );
    let stats = [
        "n",
        "mean_us",
        "stddev_us",
        "min_us",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "cv",
        "ci95_lo_us",
        "ci95_hi_us",
    ];
    assert_eq!(&h[6..18], &stats.map(String::from));
    assert_eq!(&h[18..], &["gbps", "timer"]);
}

#[test]
fn rows_round_trip_through_the_same_types() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let mut sink = CsvSink::<T>::create(&path).unwrap();
    // A label that looks like a number stays a string; an empty cell is None.
    sink.write(&line(64, "0", Some(1.5))).unwrap();
    sink.write(&line(128, "x", None)).unwrap();
    let rows = read_table::<T>(&path).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0].params,
        P {
            size: 64,
            label: "0".into()
        }
    );
    assert_eq!(rows[0].figures.gbps, Some(1.5));
    assert_eq!(rows[1].figures.gbps, None);
    assert_eq!(rows[0].stats().p50_us, 2.0);
    assert_eq!(rows[0].lead.bench, "t");
    // A row without the statistics block is refused, never written.
    let mut short = line(1, "y", None);
    short.stats = None;
    assert!(sink.write(&short).is_err());
}

#[test]
fn a_cell_that_starts_a_formula_is_written_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let mut sink = CsvSink::<T>::create(&path).unwrap();
    let host = "=cmd|' /C calc'!A0";
    sink.write(&line(64, host, Some(1.5))).unwrap();
    sink.write(&line(65, "-x", Some(2.0))).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(",'=cmd|' /C calc'!A0,") && !text.contains(",=cmd"),
        "{text}"
    );
    // Read back, the quote stays in the string; the row's numbers are numbers.
    let rows = read_table::<T>(&path).unwrap();
    assert_eq!(rows[0].params.label, format!("'{host}"));
    assert_eq!(rows[0].params.size, 64);
    assert_eq!(rows[0].figures.gbps, Some(1.5));
    assert_eq!(rows[1].params.label, "'-x");
    // A number in a string column is written as it is.
    let other = dir.path().join("n.csv");
    let mut sink = CsvSink::<T>::create(&other).unwrap();
    sink.write(&line(66, "-1.5", Some(2.0))).unwrap();
    let numbers = std::fs::read_to_string(&other).unwrap();
    assert!(numbers.contains(",-1.5,"), "{numbers}");
    // Every line of the file still parses as a record of the header's width.
    let mut rd = ::csv::Reader::from_reader(text.as_bytes());
    let width = rd.headers().unwrap().len();
    assert!(rd.records().all(|r| r.unwrap().len() == width));
}

#[test]
fn readers_name_file_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let mut sink = CsvSink::<T>::create(&path).unwrap();
    sink.write(&line(64, "a", Some(1.0))).unwrap();
    sink.write(&line(65, "b", Some(1.0))).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen(",65,", ",lots,", 1)).unwrap();
    let e = read_table::<T>(&path).unwrap_err().to_string();
    assert!(
        e.contains("t.csv") && e.contains("row 2") && e.contains("'size'") && e.contains("lots"),
        "{e}"
    );
    // Infinite, huge and negative numbers are refused, naming the column.
    for (bad, why) in [
        ("inf", "finite"),
        ("1e308", "out of range"),
        ("-5", "negative"),
    ] {
        std::fs::write(&path, text.replacen(",1.0,gpu", &format!(",{bad},gpu"), 1)).unwrap();
        let e = read_table::<T>(&path).unwrap_err().to_string();
        assert!(
            e.contains("row 1") && e.contains("'gbps'") && e.contains(why),
            "{e}"
        );
    }
    // A missing column is named even with no rows.
    std::fs::write(&path, "schema_version,run_id,bench,case,size\n").unwrap();
    let e = read_table::<T>(&path).unwrap_err().to_string();
    assert!(e.contains("missing column 'label'"), "{e}");
    // Another schema version is refused.
    std::fs::write(&path, text.replace("\n1,r1", "\n9,r1")).unwrap();
    let e = read_table::<T>(&path).unwrap_err().to_string();
    assert!(e.contains("schema_version 9"), "{e}");
}

#[test]
fn rounding_keeps_four_significant_digits() {
    assert_eq!(sig4(1234.5678), 1234.57);
    assert_eq!(sig4(1.23456), 1.2346);
    assert_eq!(sig4(0.000123456), 0.0001235);
    assert_eq!(sig4(0.0), 0.0);
}
