/**
 * The sidecar's own decision-log export (docs/observability.md, "Decision-log export"; decision
 * 2797): every record the sidecar queues for the authority is also offered to its exporter —
 * the records of this process as they are queued, and those of an earlier process as they are
 * read back from the journal. The batches then tell the authority so (`exported`), and it
 * exports none of them again: each record is exported by one process, sampled and masked by
 * that process's settings. Type-only imports: the exporter is loaded only when it is on.
 */
import type { DecisionExporter } from "../../audit/export/exporter.ts";
import type { DecisionJournal, RecoveredRecord } from "./decision-journal.ts";
import type { DecisionShipper } from "./decision-log.ts";

/** The shipper with every record it queues offered to the exporter (none: the shipper as it is). */
export function exportingShipper(
  shipper: DecisionShipper,
  exporter: DecisionExporter | undefined,
): DecisionShipper {
  if (exporter === undefined) return shipper;
  return {
    ...shipper,
    push(record, lines) {
      shipper.push(record, lines);
      exporter.offer(record as unknown as Readonly<Record<string, unknown>>);
    },
  };
}

/** The journal with each record of an earlier process offered to the exporter as the shipper reads it back. */
export function exportingJournal(
  journal: DecisionJournal | undefined,
  exporter: DecisionExporter | undefined,
): DecisionJournal | undefined {
  if (journal === undefined || exporter === undefined) return journal;
  const recovered = journal.recovered;
  return {
    ...journal,
    recovered: {
      *[Symbol.iterator](): Iterator<RecoveredRecord> {
        for (const record of recovered) {
          exporter.offer(JSON.parse(record.json) as Readonly<Record<string, unknown>>);
          yield record;
        }
      },
    },
  };
}
