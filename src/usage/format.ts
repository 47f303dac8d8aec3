/** How usage and quotas read in the sidebar. */
import type { IEdtUser, IQuota, IUsageReport, IUsageSums } from '../api';

/**
 * GPU-seconds as GPU-hours, with fewer decimals as they grow:
 * 0 -> "0", 18 -> "<0.01", 5400 -> "1.50", 90000 -> "25.0", 4e6 -> "1111".
 */
export function formatGpuHours(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) {
    return '?';
  }
  const hours = seconds / 3600;
  if (hours === 0) {
    return '0';
  }
  if (hours < 0.01) {
    return '<0.01';
  }
  if (hours < 10) {
    return hours.toFixed(2);
  }
  if (hours < 1000) {
    return hours.toFixed(1);
  }
  return String(Math.round(hours));
}

/** The share of held GPU time that trained, as "93%" ("" when none was held). */
export function usedShare(sums: IUsageSums): string {
  if (!(sums.held_gpu_seconds > 0)) {
    return '';
  }
  const share = Math.min(1, sums.used_gpu_seconds / sums.held_gpu_seconds);
  return `${Math.round(share * 100)}%`;
}

/** A row's quota column: the number of GPUs, or a dash for none. */
export function formatQuotaCell(quota: number | null): string {
  return quota === null ? '—' : String(quota);
}

/**
 * A user's quotas in a line: "No quota", or the most GPUs at once and where
 * that comes from, e.g. "2 GPUs at once (yours: 3; group vision: 2)".
 */
export function describeQuota(quota: IQuota | undefined): string {
  if (!quota || quota.gpus === null) {
    return 'No quota';
  }
  const parts: string[] = [];
  if (quota.user !== null) {
    parts.push(`yours: ${quota.user}`);
  }
  for (const [group, limit] of Object.entries(quota.groups)) {
    parts.push(`group ${group}: ${limit}`);
  }
  const gpus = `${quota.gpus} GPU${quota.gpus === 1 ? '' : 's'} at once`;
  return parts.length > 1 ? `${gpus} (${parts.join('; ')})` : gpus;
}

/** No usage: what a user with no row in a report has. */
export const NO_USAGE: IUsageSums = {
  held_gpu_seconds: 0,
  used_gpu_seconds: 0,
  jobs: 0
};

/** The caller's own sums in a by-user report (none when they held nothing). */
export function ownUsage(report: IUsageReport, me: IEdtUser): IUsageSums {
  return report.rows.find(row => row.key === me.name) ?? NO_USAGE;
}
